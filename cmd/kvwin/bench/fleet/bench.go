// Package fleet is `kvwin bench fleet`: kvwin's own router, and the
// routing policies of llm-d, SGLang and Dynamo as its scorers (package
// peers), driving a simulated fleet of N nodes × S slots in simulated
// time (sim.go), on a LoCoMo-shaped multi-turn workload or a Mooncake
// trace (workload.go), measured against the oracle's prefill (oracle.go).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"kvwin/cmd/kvwin/bench/fleet/peers"
	"kvwin/cmd/kvwin/bench/stats"
	"kvwin/kvcache"
	"kvwin/router"
)

// Options are one bench fleet sweep: every policy at every load.
type Options struct {
	Nodes, Slots int
	Kind         string
	// CacheRAM is each llama-server's host-memory prompt cache in bytes
	// (--cache-ram, promptcache.go); 0 none, the llama-server.
	CacheRAM int64
	// Tiers is each kvwin node's snapshot store (tiers.go); zero: none.
	// WithoutTiers runs every policy without them too, in rows beside.
	Tiers        Tiers
	WithoutTiers bool
	Policies     []string
	Loads        []float64
	Workload     Workload
	// Trace, if set, replaces the synthetic conversations: requests of a
	// Mooncake trace (ReadMooncake), their times scaled to each load.
	Trace []*conversation
	Model NodeModel
	// Parallel is how many runs go at once (each on one core: a run is
	// one thread of control); default 1.
	Parallel int
	// Progress, if set, is called after each run (one call at a time).
	Progress func(Row)
}

// AllPolicies is every policy bench fleet knows: kvwin's and the peers'.
func AllPolicies() []string { return append(router.Policies(), peers.Policies()...) }

// Row is one policy at one load.
type Row struct {
	Policy      string `json:"policy"`
	NodeKind    string `json:"node_kind"`
	CacheRAMMiB int64  `json:"cache_ram_mib,omitempty"` // a llama-server's --cache-ram
	// Tiers names the kvwin nodes' snapshot tiers ("ram4096+disk16384",
	// MiB); "" none. Restores count the turns whose node restored a
	// snapshot from each tier, RestoredTokens the tokens read back.
	Tiers              string `json:"tiers,omitempty"`
	RestoresRAM        int    `json:"restores_ram,omitempty"`
	RestoresDisk       int    `json:"restores_disk,omitempty"`
	RestoredTokensRAM  int    `json:"restored_tokens_ram,omitempty"`
	RestoredTokensDisk int    `json:"restored_tokens_disk,omitempty"`
	// Excess is the prefill beyond the oracle's by cause (excess.go).
	Excess            map[string]int `json:"excess_by_cause,omitempty"`
	Nodes             int            `json:"nodes"`
	Slots             int            `json:"slots"`
	Load              float64        `json:"load"`
	TTFTP50           float64        `json:"ttft_p50_ms"`
	TTFTP90           float64        `json:"ttft_p90_ms"`
	TTFTP99           float64        `json:"ttft_p99_ms"`
	QueueP50          float64        `json:"queue_p50_ms"` // arrival to prefill start
	QueueP90          float64        `json:"queue_p90_ms"`
	PrefillTokens     int            `json:"prefill_tokens"`
	OraclePrefill     int            `json:"oracle_prefill_tokens"`
	PrefillVsOracle   float64        `json:"prefill_vs_oracle"`
	HitRate           float64        `json:"hit_rate"` // cached / prompt tokens
	Throughput        float64        `json:"throughput_tokens_per_s"`
	Turns             int            `json:"turns"`
	Errors            int            `json:"errors"`
	ActivePerSlot     float64        `json:"active_per_slot"` // mean conversations in progress per slot of the fleet
	SimulatedSeconds  float64        `json:"simulated_s"`
	WallSeconds       float64        `json:"wall_s"`
	ConversationsRate float64        `json:"conversations_per_s"`
}

// Bench runs every policy at every load and returns the rows, load by
// load.
func Bench(ctx context.Context, o Options) ([]Row, error) {
	if o.Nodes <= 0 || o.Slots <= 0 || len(o.Loads) == 0 || len(o.Policies) == 0 {
		return nil, errors.New("fleet: need nodes, slots, loads and policies")
	}
	if o.Kind != KindLlamaServer && o.Kind != KindKvwin {
		return nil, fmt.Errorf("fleet: node kind %q (want %s or %s)", o.Kind, KindLlamaServer, KindKvwin)
	}
	switch {
	case o.CacheRAM < 0:
		return nil, fmt.Errorf("fleet: prompt cache of %d bytes", o.CacheRAM)
	case o.CacheRAM > 0 && o.Kind != KindLlamaServer:
		return nil, fmt.Errorf("fleet: a prompt cache (--cache-ram) is llama-server's, not node kind %s's", o.Kind)
	case o.Tiers.RAMBytes < 0 || o.Tiers.DiskBytes < 0:
		return nil, fmt.Errorf("fleet: snapshot tiers of %d and %d bytes", o.Tiers.RAMBytes, o.Tiers.DiskBytes)
	case o.Tiers.On() && o.Kind != KindKvwin:
		return nil, fmt.Errorf("fleet: snapshot tiers are a kvwin node's, not node kind %s's", o.Kind)
	}
	for _, p := range o.Policies {
		if !slices.Contains(AllPolicies(), p) {
			return nil, fmt.Errorf("fleet: unknown policy %q (want some of %v)", p, AllPolicies())
		}
	}
	convs := o.Trace
	if convs == nil {
		var err error
		if convs, err = o.Workload.generate(); err != nil {
			return nil, err
		}
	}
	orig := make([][]time.Duration, len(convs))
	for i, c := range convs {
		orig[i] = slices.Clone(c.at)
	}
	cfg := Config{Nodes: o.Nodes, Slots: o.Slots, Context: o.Workload.Context, Kind: o.Kind, CacheRAM: o.CacheRAM, Model: o.Model, Tiers: o.Tiers}
	// Each run: a policy, with the tiers or (WithoutTiers) without.
	type config struct {
		policy string
		tiers  Tiers
	}
	var runs []config
	for _, p := range o.Policies {
		runs = append(runs, config{p, o.Tiers})
	}
	if o.WithoutTiers && o.Tiers.On() {
		for _, p := range o.Policies {
			runs = append(runs, config{p, Tiers{}})
		}
	}
	var rows []Row
	for _, load := range o.Loads {
		if load <= 0 {
			return nil, fmt.Errorf("fleet: load %v", load)
		}
		rate := schedule(convs, orig, load, o)
		at := make([]Row, len(runs))
		errs := make([]error, len(runs))
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan int)
		for range max(o.Parallel, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					c := cfg
					c.Tiers = runs[i].tiers
					at[i], errs[i] = runOne(ctx, c, runs[i].policy, load, rate, convs)
					if errs[i] == nil && o.Progress != nil {
						mu.Lock()
						o.Progress(at[i])
						mu.Unlock()
					}
				}
			}()
		}
		for i := range runs {
			next <- i
		}
		close(next)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		rows = append(rows, at...)
	}
	return rows, nil
}

// runOne runs one policy at one load; the conversations are only read.
func runOne(ctx context.Context, cfg Config, policy string, load, rate float64, convs []*conversation) (Row, error) {
	cfg.Policy = policy
	began := time.Now()
	out, err := run(ctx, cfg, convs)
	if err != nil {
		return Row{}, fmt.Errorf("policy %s at load %v: %w", policy, load, err)
	}
	row := summarize(out.turns, cfg, load)
	row.ActivePerSlot = out.meanActive / float64(cfg.Nodes*cfg.Slots)
	row.ConversationsRate = rate
	row.WallSeconds = time.Since(began).Seconds()
	return row, nil
}

// schedule sets the conversations' arrival times for load: the rate at
// which their prompts, computed from nothing, would keep the fleet's
// prefill busy that share of the time (one prefill at a time per node).
// A trace keeps its own times, scaled. It returns the conversations'
// arrival rate per second.
func schedule(convs []*conversation, orig [][]time.Duration, load float64, o Options) float64 {
	work := 0.0 // prefill seconds of every turn, computed whole
	for _, c := range convs {
		for t := range c.turns() {
			work += o.Model.prefill(c.promptEnd[t], 0).Seconds()
		}
	}
	if o.Trace == nil {
		rate := load * float64(o.Nodes) / (work / float64(len(convs)))
		arrive(convs, rate, o.Workload.Seed)
		return rate
	}
	span := 0.0
	for _, at := range orig {
		span = max(span, at[len(at)-1].Seconds())
	}
	natural := work / max(span, 1e-9) / float64(o.Nodes)
	scale := natural / load
	for i, c := range convs {
		for t := range c.at {
			c.at[t] = time.Duration(float64(orig[i][t]) * scale)
		}
		c.start = c.at[0]
	}
	return float64(len(convs)) / max(span*scale, 1e-9)
}

// summarize sums one run's turns.
func summarize(turns []*turnRecord, cfg Config, load float64) Row {
	r := Row{Policy: cfg.Policy, NodeKind: cfg.Kind, CacheRAMMiB: cfg.CacheRAM >> 20, Tiers: cfg.Tiers.String(), Nodes: cfg.Nodes, Slots: cfg.Slots, Load: load, Turns: len(turns)}
	var ttft, queue []float64
	prompt, cached, generated := 0, 0, 0
	var first, last time.Duration = -1, 0
	for _, t := range turns {
		if first < 0 || t.arrived < first {
			first = t.arrived
		}
		last = max(last, t.end)
		if t.err != nil {
			r.Errors++
			continue
		}
		ttft = append(ttft, ms(t.first-t.arrived))
		queue = append(queue, ms(t.prefillAt-t.arrived))
		prompt += t.promptLen
		cached += t.cached
		r.PrefillTokens += t.computed
		generated += t.generated
		switch {
		case t.restored == 0:
		case t.restoredFrom == kvcache.MediumRAM:
			r.RestoresRAM++
			r.RestoredTokensRAM += t.restored
		default:
			r.RestoresDisk++
			r.RestoredTokensDisk += t.restored
		}
	}
	each := oracleTurns(turns) // one pass for the total and the causes
	r.OraclePrefill = oracleTotal(each)
	r.Excess = excess(turns, each)
	if r.OraclePrefill > 0 {
		r.PrefillVsOracle = float64(r.PrefillTokens) / float64(r.OraclePrefill)
	}
	if prompt > 0 {
		r.HitRate = float64(cached) / float64(prompt)
	}
	if len(ttft) > 0 {
		r.TTFTP50, r.TTFTP90, r.TTFTP99 = stats.Quantile(ttft, 0.5), stats.Quantile(ttft, 0.9), stats.Quantile(ttft, 0.99)
		r.QueueP50, r.QueueP90 = stats.Quantile(queue, 0.5), stats.Quantile(queue, 0.9)
	}
	span := (last - first).Seconds()
	r.SimulatedSeconds = span
	if span > 0 {
		r.Throughput = float64(generated) / span
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
