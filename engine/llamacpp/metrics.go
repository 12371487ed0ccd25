package llamacpp

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/kvcache"
)

// collector exposes the engine's counters as Prometheus metrics. It reads
// atomics and a copy of the slots; it never blocks the run loop.
type collector struct {
	e     *Engine
	descs map[string]*prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// Collector returns a Prometheus collector of the engine's counters
// (kvwin_engine_*), labelled with the backend name.
func (e *Engine) Collector() prometheus.Collector {
	c := &collector{e: e, descs: map[string]*prometheus.Desc{}}
	for name, help := range map[string]string{
		"requests_total":               "Requests admitted to a slot.",
		"prompt_tokens_total":          "Prompt tokens of admitted requests.",
		"cached_tokens_total":          "Prompt tokens reused from the KV cache instead of computed.",
		"prompt_decoded_tokens_total":  "Prompt tokens computed (handed to llama_decode).",
		"generated_tokens_total":       "Tokens generated.",
		"decode_calls_total":           "llama_decode calls that succeeded (a prompt of n tokens takes ceil(n / batch) when nothing else runs).",
		"forks_total":                  "Prefixes copied from one slot into another (KvCacheSeqCp).",
		"shifts_total":                 "Kept history moved over evicted turns instead of recomputed (--shift).",
		"count_reuses_total":           "Conversations whose earlier messages' token counts were found in one lookup (ConversationCounter) instead of counted again.",
		"snapshot_saves_total":         "KV snapshots saved (to RAM, or to disk when there is no RAM tier).",
		"snapshot_ram_restores_total":  "KV snapshots restored into a slot from the RAM tier.",
		"snapshot_disk_restores_total": "KV snapshots restored into a slot from disk.",
		"snapshot_demotions_total":     "KV snapshots moved from the RAM tier to disk to make room.",
		"snapshot_ram_bytes":           "Bytes of KV snapshots held in the RAM tier (--kv-ram).",
		"snapshot_disk_bytes":          "Bytes of KV snapshots held on disk.",
		"snapshot_restores_total":      "KV snapshots restored into a slot.",
		"snapshot_failures_total":      "Snapshots that could not be used (corrupt, mismatched, no room); a prefill replaced them.",
		"snapshot_drops_total":         "Slots given away without a snapshot because the save queue was full.",
		"snapshot_save_failures_total": "Snapshots whose write failed (disk full, I/O error): their slot was given away without one.",
		"slots_busy":                   "Slots serving a request now.",
		"slots":                        "Slots of the engine.",
	} {
		c.descs[name] = prometheus.NewDesc("kvwin_engine_"+name, help, nil, prometheus.Labels{"backend": e.cfg.Name})
	}
	// The gauges the Gateway API Inference Extension's model-server
	// protocol reads from vLLM-compatible servers, under vLLM's names and
	// its model_name label, so an llm-d or other endpoint picker balances
	// kvwin nodes too (docs/fleet.md).
	for name, help := range map[string]string{
		"vllm:num_requests_waiting": "Requests admitted and waiting for a slot (TotalQueuedRequests).",
		"vllm:num_requests_running": "Requests running in a slot (TotalRunningRequests).",
		"vllm:kv_cache_usage_perc":  "KV cache in use, 0 to 1: cells used over slots × ctx (KVCacheUtilization).",
	} {
		c.descs[name] = prometheus.NewDesc(name, help, nil, prometheus.Labels{"model_name": e.cfg.ModelID})
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for name, v := range c.counters() {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v.Load()))
	}
	busy := 0
	slots := c.e.Slots()
	for _, s := range slots {
		if s.Processing {
			busy++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.descs["slots_busy"], prometheus.GaugeValue, float64(busy))
	ch <- prometheus.MustNewConstMetric(c.descs["slots"], prometheus.GaugeValue, float64(len(slots)))
	load := c.e.Load()
	ch <- prometheus.MustNewConstMetric(c.descs["vllm:num_requests_waiting"], prometheus.GaugeValue, float64(load.Waiting))
	ch <- prometheus.MustNewConstMetric(c.descs["vllm:num_requests_running"], prometheus.GaugeValue, float64(load.Running))
	if st := c.e.kv.store; st != nil {
		ch <- prometheus.MustNewConstMetric(c.descs["snapshot_demotions_total"], prometheus.CounterValue, float64(st.Demotions()))
		ch <- prometheus.MustNewConstMetric(c.descs["snapshot_ram_bytes"], prometheus.GaugeValue, float64(st.RAMBytes()))
		ch <- prometheus.MustNewConstMetric(c.descs["snapshot_disk_bytes"], prometheus.GaugeValue, float64(st.Bytes()))
	}
	cells := max(c.e.cfg.Slots*c.e.cfg.Ctx, 1)
	ch <- prometheus.MustNewConstMetric(c.descs["vllm:kv_cache_usage_perc"], prometheus.GaugeValue, min(float64(c.e.usedCells.Load())/float64(cells), 1))
}

// counters are the engine's counters by metric name.
func (c *collector) counters() map[string]*atomic.Int64 {
	st := &c.e.stats
	kv := c.e.kv
	return map[string]*atomic.Int64{
		"requests_total":               &st.Requests,
		"prompt_tokens_total":          &st.PromptTokens,
		"cached_tokens_total":          &st.CachedTokens,
		"prompt_decoded_tokens_total":  &st.PromptDecoded,
		"generated_tokens_total":       &st.GeneratedTokens,
		"decode_calls_total":           &st.Decodes,
		"forks_total":                  &st.Forks,
		"shifts_total":                 &st.Shifts,
		"count_reuses_total":           &st.CountReuses,
		"snapshot_saves_total":         &kv.saves,
		"snapshot_restores_total":      &kv.restores,
		"snapshot_ram_restores_total":  &kv.restoresFrom[kvcache.MediumRAM],
		"snapshot_disk_restores_total": &kv.restoresFrom[kvcache.MediumDisk],
		"snapshot_failures_total":      &kv.restoreFailures,
		"snapshot_drops_total":         &kv.saveDrops,
		"snapshot_save_failures_total": &kv.saveFailures,
	}
}
