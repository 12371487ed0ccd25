package kvcache

import (
	"encoding/json"
	"slices"
	"testing"
)

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not an object", v)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestSnapshotJSONShape(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{})
	c := k.Tokens(tokens(90, 100))
	r := mustRegistry(t, BackendConfig{Name: "b", CapacityBlocks: 50}, BackendConfig{Name: "a"})
	for _, loc := range []Location{{"b", 2}, {"b", 0}, {"a", 0}} {
		if err := r.Record(loc, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Correct(Location{"b", 0}, c, 40); err != nil {
		t.Fatal(err)
	}
	if err := r.AddSnapshot("b", "s", c, 1234); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}

	counters := []string{"evictions", "hits", "misses"}
	snapshot := []string{"snapshot_bytes", "snapshot_restores", "snapshot_saves"}
	want := map[string][]string{
		"document": {"backends", "totals"},
		"totals":   sorted("blocks_held", counters, snapshot),
		"backend":  sorted("blocks_held", counters, snapshot, "capacity_blocks", "name", "slots"),
		"slot":     sorted("blocks_held", counters, "id"),
	}
	backends := doc["backends"].([]any)
	b := backends[1].(map[string]any)
	got := map[string][]string{
		"document": keysOf(t, doc),
		"totals":   keysOf(t, doc["totals"]),
		"backend":  keysOf(t, b),
		"slot":     keysOf(t, b["slots"].([]any)[0]),
	}
	for name := range want {
		t.Run(name, func(t *testing.T) {
			if !slices.Equal(got[name], want[name]) {
				t.Fatalf("keys %v, want %v", got[name], want[name])
			}
		})
	}

	t.Run("values and order", func(t *testing.T) {
		st := r.Snapshot()
		if st.Backends[0].Name != "a" || st.Backends[1].Name != "b" {
			t.Fatalf("backends not by name: %s, %s", st.Backends[0].Name, st.Backends[1].Name)
		}
		bs := st.Backends[1]
		if bs.Slots[0].ID != 0 || bs.Slots[1].ID != 2 {
			t.Fatalf("slots not by id: %+v", bs.Slots)
		}
		// Each slot recorded 6 blocks; b/0 was corrected to 2 (40 reused tokens).
		if st.Totals.BlocksHeld != 6+2+6 || bs.BlocksHeld != 8 || bs.CapacityBlocks != 50 {
			t.Fatalf("blocks %+v", st)
		}
		if st.Totals.Hits != 2 || st.Totals.Misses != 4 || st.Totals.SnapshotBytes != 1234 {
			t.Fatalf("totals %+v", st.Totals)
		}
	})

	t.Run("empty registry", func(t *testing.T) {
		raw, err := json.Marshal(mustRegistry(t).Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		const want = `{"totals":{"blocks_held":0,"hits":0,"misses":0,"evictions":0,"snapshot_saves":0,"snapshot_restores":0,"snapshot_bytes":0},"backends":[]}`
		if string(raw) != want {
			t.Fatalf("got %s\nwant %s", raw, want)
		}
	})
}

func sorted(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			out = append(out, p)
		case []string:
			out = append(out, p...)
		}
	}
	slices.Sort(out)
	return out
}
