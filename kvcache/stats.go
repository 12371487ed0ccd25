package kvcache

import (
	"cmp"
	"slices"
)

// Stats is the registry as GET /kvwin/v1/registry shows it
// (docs/architecture.md, "HTTP"). Its JSON shape is a contract: fields
// marked json:"-" are for Go callers and /metrics only.
type Stats struct {
	Totals   Totals         `json:"totals"`
	Backends []BackendStats `json:"backends"` // by name
}

// Totals sums every backend.
type Totals struct {
	BlocksHeld int `json:"blocks_held"`
	Counts
}

// Counts are the figures of a backend that Totals sums as they are: blocks
// hit, missed and evicted, snapshots saved and restored, and the bytes the
// snapshots take. Embedded, their fields stand in the JSON where Counts
// stands.
type Counts struct {
	Hits             uint64 `json:"hits"`
	Misses           uint64 `json:"misses"`
	Evictions        uint64 `json:"evictions"`
	SnapshotSaves    uint64 `json:"snapshot_saves"`
	SnapshotRestores uint64 `json:"snapshot_restores"`
	SnapshotBytes    int64  `json:"snapshot_bytes"`
}

// add adds o to c.
func (c *Counts) add(o Counts) {
	c.Hits += o.Hits
	c.Misses += o.Misses
	c.Evictions += o.Evictions
	c.SnapshotSaves += o.SnapshotSaves
	c.SnapshotRestores += o.SnapshotRestores
	c.SnapshotBytes += o.SnapshotBytes
}

// BackendStats is one backend. Hits, Misses and Evictions count blocks and
// are the sums over its slots; SnapshotBytes is what its snapshots take now.
type BackendStats struct {
	Name           string `json:"name"`
	BlocksHeld     int    `json:"blocks_held"`
	CapacityBlocks int    `json:"capacity_blocks"` // 0: unbounded
	Counts
	Slots []SlotStats `json:"slots"` // by id

	Snapshots      int    `json:"-"` // snapshots recorded
	SnapshotBlocks int    `json:"-"` // blocks held in the snapshot tier
	ReuseClamped   uint64 `json:"-"` // reports of reuse outside what was sent
	Corrected      uint64 `json:"-"` // blocks dropped because the backend did not reuse them
}

// SlotStats is one slot. Hits are prompt blocks the backend reported
// reusing, misses the prompt blocks it computed, evictions the blocks the
// slot lost to capacity, to another conversation or to a release.
type SlotStats struct {
	ID         int    `json:"id"`
	BlocksHeld int    `json:"blocks_held"`
	Hits       uint64 `json:"hits"`
	Misses     uint64 `json:"misses"`
	Evictions  uint64 `json:"evictions"`
}

// Snapshot returns a copy of the registry's figures. It takes the read lock.
func (r *Registry) Snapshot() Stats {
	r.mu.RLock()
	st := Stats{Backends: make([]BackendStats, 0, len(r.backends))}
	for _, b := range r.backends {
		bs := BackendStats{
			Name:           b.name,
			BlocksHeld:     b.held,
			CapacityBlocks: b.capacity,
			Counts: Counts{
				SnapshotSaves:    b.saves.Load(),
				SnapshotRestores: b.restores.Load(),
				SnapshotBytes:    b.snapBytes,
			},
			Slots:          make([]SlotStats, 0, len(b.slots)),
			Snapshots:      len(b.snaps),
			SnapshotBlocks: b.snapBlocks,
			ReuseClamped:   b.clamped.Load(),
			Corrected:      b.corrected.Load(),
		}
		for _, s := range b.slots {
			ss := SlotStats{
				ID:         s.id,
				BlocksHeld: len(s.keys),
				Hits:       s.hits.Load(),
				Misses:     s.misses.Load(),
				Evictions:  s.evictions.Load(),
			}
			bs.Hits += ss.Hits
			bs.Misses += ss.Misses
			bs.Evictions += ss.Evictions
			bs.Slots = append(bs.Slots, ss)
		}
		st.Backends = append(st.Backends, bs)
	}
	r.mu.RUnlock()

	slices.SortFunc(st.Backends, func(a, b BackendStats) int { return cmp.Compare(a.Name, b.Name) })
	for _, bs := range st.Backends {
		slices.SortFunc(bs.Slots, func(a, b SlotStats) int { return cmp.Compare(a.ID, b.ID) })
		st.Totals.BlocksHeld += bs.BlocksHeld
		st.Totals.add(bs.Counts)
	}
	return st
}
