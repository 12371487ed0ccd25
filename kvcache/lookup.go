package kvcache

import (
	"cmp"
	"encoding"
	"fmt"
	"slices"
)

// Location is a backend's slot. Backends without slots (Ollama) use slot 0.
type Location struct {
	Backend string `json:"backend"`
	Slot    int    `json:"slot"` // -1 in a Match of the snapshot tier
}

// Tier says where a Match's blocks are: computed in a live slot, or saved in
// a snapshot that must be restored into a slot first.
type Tier uint8

// Tiers.
const (
	TierSlot Tier = iota
	TierSnapshot
)

// String returns "slot" or "snapshot".
func (t Tier) String() string {
	if t == TierSnapshot {
		return "snapshot"
	}
	return "slot"
}

// MarshalText writes the tier as "slot" or "snapshot".
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

var (
	_ fmt.Stringer           = TierSlot
	_ encoding.TextMarshaler = TierSlot
)

// Match is one location's hold on a looked-up chain.
type Match struct {
	Location
	Tier   Tier `json:"tier"`
	Blocks int  `json:"blocks"` // leading blocks held, up to the first gap
	// Length is Blocks in units: tokens, or bytes of text when Approximate.
	Length int `json:"length"`
	// Snapshot is the snapshot's id in the snapshot tier, "" otherwise.
	Snapshot    string `json:"snapshot,omitempty"`
	Approximate bool   `json:"approximate"`
}

// Kept is a snapshot Match with the blocks the snapshot holds in all.
type Kept struct {
	Match
	Held int `json:"held_blocks"`
}

// Result is the answer to a Lookup.
type Result struct {
	// Matches lists every live slot holding at least the first block, and per
	// backend its best snapshot: most blocks first, slots before snapshots,
	// then by backend and slot. Locations holding nothing are absent.
	Matches []Match `json:"matches"`
	// Keeps lists per backend the snapshot a prompt cache loads for the
	// chain (llama-server's --cache-ram): the one keeping the largest
	// share of itself (Blocks / Held), among those keeping a quarter or
	// more; ties to more blocks, then to the smaller id.
	Keeps       []Kept `json:"keeps,omitempty"`
	Blocks      int    `json:"blocks"` // blocks in the chain looked up
	Approximate bool   `json:"approximate"`
}

// Lookup returns, per location, how many leading blocks of c it holds. It
// takes the read lock only, so lookups run in parallel. Its cost is a map
// read plus O(log n) key comparisons for each resident chain that starts
// with c's first block (with a shared system prompt: every chain).
func (r *Registry) Lookup(c Chain) Result {
	res := Result{Blocks: len(c.Keys), Approximate: c.Approximate}
	if len(c.Keys) == 0 {
		return res
	}
	r.mu.RLock()
	holders := r.roots[c.Keys[0]]
	// At most one match per live slot and one per backend: sizing Matches
	// once keeps a lookup to one allocation of results.
	most := 0
	for _, b := range r.backends {
		most += b.lru.n + 1
	}
	res.Matches = make([]Match, 0, min(len(holders), most))
	var bestSnap, keep map[*backend]int // index in res.Matches, res.Keeps of a backend's best snapshot, its kept one
	for _, h := range holders {
		n := commonPrefix(h.keys, c.Keys)
		m := Match{
			Location:    Location{Backend: h.b.name, Slot: -1},
			Blocks:      n,
			Length:      c.Units(n),
			Approximate: c.Approximate,
		}
		if h.slot != nil {
			m.Slot = h.slot.id
			res.Matches = append(res.Matches, m)
			continue
		}
		m.Tier, m.Snapshot = TierSnapshot, h.snap.id
		if bestSnap == nil {
			bestSnap, keep = map[*backend]int{}, map[*backend]int{}
		}
		if k := (Kept{Match: m, Held: len(h.keys)}); 4*n >= k.Held {
			i, seen := keep[h.b]
			switch {
			case !seen:
				keep[h.b] = len(res.Keeps)
				res.Keeps = append(res.Keeps, k)
			case keepsMore(k, res.Keeps[i]):
				res.Keeps[i] = k
			}
		}
		i, seen := bestSnap[h.b]
		switch {
		case !seen:
			bestSnap[h.b] = len(res.Matches)
			res.Matches = append(res.Matches, m)
		case n > res.Matches[i].Blocks || n == res.Matches[i].Blocks && m.Snapshot < res.Matches[i].Snapshot:
			res.Matches[i] = m // ties go to the smaller id, so answers do not depend on map order
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(res.Keeps, func(a, b Kept) int { return cmp.Compare(a.Backend, b.Backend) })
	slices.SortFunc(res.Matches, func(a, b Match) int {
		return cmp.Or(
			cmp.Compare(b.Blocks, a.Blocks),
			cmp.Compare(a.Tier, b.Tier),
			cmp.Compare(a.Backend, b.Backend),
			cmp.Compare(a.Slot, b.Slot),
		)
	})
	return res
}

// keepsMore reports whether snapshot a keeps a larger share of itself
// than b (see Result.Keeps).
func keepsMore(a, b Kept) bool {
	if x, y := a.Blocks*b.Held, b.Blocks*a.Held; x != y {
		return x > y
	}
	if a.Blocks != b.Blocks {
		return a.Blocks > b.Blocks
	}
	return a.Snapshot < b.Snapshot
}
