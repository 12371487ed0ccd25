package kvcache

import (
	"fmt"
	"sync"
)

// The snapshot tier: KV a backend saved (to disk, by the snapshot store) when
// its slot was given to another conversation. Snapshots belong to a backend,
// not a slot: a restore may go into any free slot. The registry only records
// which chains are saved and counts; the store owns the files, their LRU and
// their verification, and tells the registry what it added and removed.

// snapshot is one saved chain.
type snapshot struct {
	id string
	chain
	bytes int64
}

// AddSnapshot records that the named backend has saved c under id, taking bytes on
// disk. Adding an id again replaces it. It does not count a save (a store
// re-indexing its files at start-up adds them too); see CountSnapshotSave.
func (r *Registry) AddSnapshot(name, id string, c Chain, bytes int64) error {
	if err := c.validate(); err != nil {
		return err
	}
	if id == "" || bytes < 0 {
		return fmt.Errorf("kvcache: snapshot %q of %d bytes: %w", id, bytes, ErrInvalidSnapshot)
	}
	return r.onBackend(name, &r.mu, func(b *backend) error {
		sn := b.snaps[id]
		if sn == nil {
			sn = &snapshot{id: id, chain: chain{rootPos: -1, b: b}}
			sn.snap = sn
			b.snaps[id] = sn
		}
		b.snapBlocks += len(c.Keys) - len(sn.keys)
		b.snapBytes += bytes - sn.bytes
		sn.bytes = bytes
		r.setChain(&sn.chain, c.Keys)
		return nil
	})
}

// RemoveSnapshot forgets a snapshot the store deleted (evicted, corrupt,
// restored and discarded).
func (r *Registry) RemoveSnapshot(name, id string) error {
	return r.onBackend(name, &r.mu, func(b *backend) error {
		sn := b.snaps[id]
		if sn == nil {
			return fmt.Errorf("kvcache: backend %q snapshot %q: %w", name, id, ErrUnknownSnapshot)
		}
		b.snapBlocks -= len(sn.keys)
		b.snapBytes -= sn.bytes
		r.setChain(&sn.chain, nil)
		delete(b.snaps, id)
		return nil
	})
}

// CountSnapshotSave counts one snapshot written for backend.
func (r *Registry) CountSnapshotSave(name string) error {
	return r.count(name, func(b *backend) { b.saves.Add(1) })
}

// CountSnapshotRestore counts one snapshot restored into a slot of backend.
// The slot's new hold is stated with Record, as for any request.
func (r *Registry) CountSnapshotRestore(name string) error {
	return r.count(name, func(b *backend) { b.restores.Add(1) })
}

// count bumps an atomic counter of the named backend under the read lock, so counting
// never waits for lookups.
func (r *Registry) count(name string, bump func(*backend)) error {
	return r.onBackend(name, r.mu.RLocker(), func(b *backend) error {
		bump(b)
		return nil
	})
}

// onBackend runs f on the named backend holding l (r.mu, or its read
// side), or returns the error of a backend not added.
func (r *Registry) onBackend(name string, l sync.Locker, f func(*backend) error) error {
	l.Lock()
	defer l.Unlock()
	b, err := r.backend(name)
	if err != nil {
		return err
	}
	return f(b)
}

// backend returns the named backend, or an error wrapping
// ErrUnknownBackend. Callers hold r.mu.
func (r *Registry) backend(name string) (*backend, error) {
	b := r.backends[name]
	if b == nil {
		return nil, fmt.Errorf("kvcache: backend %q: %w", name, ErrUnknownBackend)
	}
	return b, nil
}
