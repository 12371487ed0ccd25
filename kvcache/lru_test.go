package kvcache

import "testing"

func TestEvictionTailsFirstLRUFirst(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	// Three conversations of 4 blocks each, recorded in slots 0, 1, 2 in that
	// order; slot 0 is then used again, so slot 1 is the least recently used.
	convs := [][]int{tokens(60, 64), tokens(61, 64), tokens(62, 64)}
	for _, tc := range []struct {
		name      string
		capacity  int
		want      [3]int // blocks each slot still holds
		evictions [3]uint64
	}{
		{"room for all", 12, [3]int{4, 4, 4}, [3]uint64{}},
		{"one block over: LRU chain's tail", 11, [3]int{4, 3, 4}, [3]uint64{0, 1, 0}},
		{"a whole chain over: LRU chain, tail to head", 8, [3]int{4, 0, 4}, [3]uint64{0, 4, 0}},
		{"more: then the next LRU chain's tail", 6, [3]int{4, 0, 2}, [3]uint64{0, 4, 2}},
		{"less than one chain: the recent one is trimmed last", 3, [3]int{3, 0, 0}, [3]uint64{1, 4, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRegistry(t, BackendConfig{Name: "a"})
			for i, conv := range convs {
				if err := r.Record(Location{"a", i}, k.Tokens(conv)); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Record(Location{"a", 0}, k.Tokens(convs[0])); err != nil {
				t.Fatal(err)
			}
			// Lowering the capacity evicts at once, as a Record over capacity would.
			if err := r.SetBackend(BackendConfig{Name: "a", CapacityBlocks: tc.capacity}); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, r)
			st := r.Snapshot().Backends[0]
			for i, conv := range convs {
				loc := Location{"a", i}
				if got := blocksAt(r.Lookup(k.Tokens(conv)), loc, TierSlot); got != tc.want[i] {
					t.Errorf("slot %d holds %d blocks, want %d", i, got, tc.want[i])
				}
				if got := st.Slots[i].Evictions; got != tc.evictions[i] {
					t.Errorf("slot %d evictions %d, want %d", i, got, tc.evictions[i])
				}
			}
		})
	}
}

func TestEvictionOnRecord(t *testing.T) {
	// A capacity of 10 blocks: recording a third 4-block chain trims the least
	// recently used one's tail by 2 (tails first), keeping its head.
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	r := mustRegistry(t, BackendConfig{Name: "a", CapacityBlocks: 10})
	convs := [][]int{tokens(70, 64), tokens(71, 64), tokens(72, 64)}
	for i, conv := range convs {
		if err := r.Record(Location{"a", i}, k.Tokens(conv)); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, r)
	}
	want := []int{2, 4, 4}
	for i, conv := range convs {
		if got := blocksAt(r.Lookup(k.Tokens(conv)), Location{"a", i}, TierSlot); got != want[i] {
			t.Errorf("slot %d holds %d blocks, want %d", i, got, want[i])
		}
	}
	// A single chain longer than the capacity keeps its head.
	if err := r.Record(Location{"a", 5}, k.Tokens(tokens(73, 400))); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, r)
	if got := blocksAt(r.Lookup(k.Tokens(tokens(73, 400))), Location{"a", 5}, TierSlot); got != 10 {
		t.Errorf("oversized chain holds %d blocks, want its first 10", got)
	}
	if got := r.Snapshot().Totals.BlocksHeld; got != 10 {
		t.Errorf("blocks held %d, want the capacity 10", got)
	}
}
