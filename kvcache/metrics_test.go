package kvcache

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{})
	c := k.Tokens(tokens(110, 100)) // 6 blocks
	r := mustRegistry(t, BackendConfig{Name: "a", CapacityBlocks: 40})
	for _, err := range []error{
		r.Record(Location{"a", 1}, c),
		r.Correct(Location{"a", 1}, c, 5000), // clamped
		r.AddSnapshot("a", "s", c, 4096),
		r.CountSnapshotSave("a"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The pedantic registry checks descriptors against what Collect sends.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(r))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()] += v
		}
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"kvwin_registry_blocks_held", 6},
		{"kvwin_registry_capacity_blocks", 40},
		{"kvwin_registry_hits_total", 6},
		{"kvwin_registry_misses_total", 0},
		{"kvwin_registry_reuse_clamped_total", 1},
		{"kvwin_registry_snapshot_saves_total", 1},
		{"kvwin_registry_snapshot_bytes", 4096},
		{"kvwin_registry_snapshot_blocks", 6},
		{"kvwin_registry_slot_blocks_held", 6},
		{"kvwin_registry_slot_hits_total", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := got[tc.name]
			if !ok || v != tc.want {
				t.Fatalf("%s = %v (present %v), want %v", tc.name, v, ok, tc.want)
			}
		})
	}
}
