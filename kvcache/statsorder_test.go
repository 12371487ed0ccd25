package kvcache

import (
	"encoding/json"
	"testing"
)

// TestStatsFieldOrder pins the bytes of a backend's and the totals' JSON,
// field order included: GET /kvwin/v1/registry is a contract.
func TestStatsFieldOrder(t *testing.T) {
	st := Stats{Backends: []BackendStats{{Name: "a", BlocksHeld: 1, CapacityBlocks: 2, Slots: []SlotStats{{ID: 3, BlocksHeld: 1, Hits: 4, Misses: 5, Evictions: 6}}}}}
	b := &st.Backends[0]
	b.Hits, b.Misses, b.Evictions, b.SnapshotSaves, b.SnapshotRestores, b.SnapshotBytes = 4, 5, 6, 7, 8, 9
	b.Snapshots, b.SnapshotBlocks, b.ReuseClamped, b.Corrected = 1, 1, 1, 1
	st.Totals.BlocksHeld = 1
	st.Totals.Hits, st.Totals.Misses, st.Totals.Evictions = 4, 5, 6
	st.Totals.SnapshotSaves, st.Totals.SnapshotRestores, st.Totals.SnapshotBytes = 7, 8, 9
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"totals":{"blocks_held":1,"hits":4,"misses":5,"evictions":6,"snapshot_saves":7,"snapshot_restores":8,"snapshot_bytes":9},` +
		`"backends":[{"name":"a","blocks_held":1,"capacity_blocks":2,"hits":4,"misses":5,"evictions":6,"snapshot_saves":7,"snapshot_restores":8,"snapshot_bytes":9,` +
		`"slots":[{"id":3,"blocks_held":1,"hits":4,"misses":5,"evictions":6}]}]}`
	if string(raw) != want {
		t.Fatalf("got  %s\nwant %s", raw, want)
	}
}
