package kvcache

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Registry's figures as kvwin_registry_* metrics, read
// from Snapshot at each scrape. The web layer only registers it. Per-backend
// and per-slot figures are separate metrics, so summing one never counts a
// block twice; totals are left to PromQL.
type Collector struct {
	r *Registry

	blocks, capacity, hits, misses, evictions         *prometheus.Desc
	saves, restores, snapBytes, snapBlocks, snapshots *prometheus.Desc
	clamped, corrected                                *prometheus.Desc
	slotBlocks, slotHits, slotMisses, slotEvictions   *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector over r.
func NewCollector(r *Registry) *Collector {
	b := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("kvwin_registry_"+name, help, []string{"backend"}, nil)
	}
	s := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("kvwin_registry_slot_"+name, help, []string{"backend", "slot"}, nil)
	}
	return &Collector{
		r:             r,
		blocks:        b("blocks_held", "KV blocks the registry believes the backend's slots hold."),
		capacity:      b("capacity_blocks", "KV blocks the backend can hold; 0 when unbounded."),
		hits:          b("hits_total", "Prompt blocks the backend reported reusing."),
		misses:        b("misses_total", "Prompt blocks the backend computed."),
		evictions:     b("evictions_total", "Blocks the backend's slots lost to capacity, other conversations or releases."),
		saves:         b("snapshot_saves_total", "KV snapshots written."),
		restores:      b("snapshot_restores_total", "KV snapshots restored into a slot."),
		snapBytes:     b("snapshot_bytes", "Bytes the backend's KV snapshots take."),
		snapBlocks:    b("snapshot_blocks", "KV blocks held in the backend's snapshots."),
		snapshots:     b("snapshots", "KV snapshots recorded for the backend."),
		clamped:       b("reuse_clamped_total", "Reports of reused tokens outside what the backend was sent."),
		corrected:     b("corrected_blocks_total", "Blocks dropped because the backend did not reuse them."),
		slotBlocks:    s("blocks_held", "KV blocks the registry believes the slot holds."),
		slotHits:      s("hits_total", "Prompt blocks the slot reused."),
		slotMisses:    s("misses_total", "Prompt blocks the slot computed."),
		slotEvictions: s("evictions_total", "Blocks the slot lost."),
	}
}

// Describe sends every metric's descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.blocks, c.capacity, c.hits, c.misses, c.evictions,
		c.saves, c.restores, c.snapBytes, c.snapBlocks, c.snapshots,
		c.clamped, c.corrected,
		c.slotBlocks, c.slotHits, c.slotMisses, c.slotEvictions,
	} {
		ch <- d
	}
}

// Collect sends the registry's current figures. It takes the registry's read
// lock briefly (Snapshot) and is safe for concurrent scrapes.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, b := range c.r.Snapshot().Backends {
		gauge(c.blocks, float64(b.BlocksHeld), b.Name)
		gauge(c.capacity, float64(b.CapacityBlocks), b.Name)
		counter(c.hits, b.Hits, b.Name)
		counter(c.misses, b.Misses, b.Name)
		counter(c.evictions, b.Evictions, b.Name)
		counter(c.saves, b.SnapshotSaves, b.Name)
		counter(c.restores, b.SnapshotRestores, b.Name)
		gauge(c.snapBytes, float64(b.SnapshotBytes), b.Name)
		gauge(c.snapBlocks, float64(b.SnapshotBlocks), b.Name)
		gauge(c.snapshots, float64(b.Snapshots), b.Name)
		counter(c.clamped, b.ReuseClamped, b.Name)
		counter(c.corrected, b.Corrected, b.Name)
		for _, s := range b.Slots {
			id := strconv.Itoa(s.ID)
			gauge(c.slotBlocks, float64(s.BlocksHeld), b.Name, id)
			counter(c.slotHits, s.Hits, b.Name, id)
			counter(c.slotMisses, s.Misses, b.Name, id)
			counter(c.slotEvictions, s.Evictions, b.Name, id)
		}
	}
}
