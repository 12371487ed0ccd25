package kvcache

import (
	"fmt"
	"testing"
)

// check verifies the invariants stated at the top of registry.go. Tests call
// it after every change they make, so a broken invariant fails where it broke.
func (r *Registry) check() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	indexed := 0
	for k, list := range r.roots {
		if len(list) == 0 {
			return fmt.Errorf("empty root list for %x", k)
		}
		for i, c := range list {
			if len(c.keys) == 0 || c.keys[0] != k || c.rootPos != i {
				return fmt.Errorf("root %x[%d]: chain of %d keys at rootPos %d", k, i, len(c.keys), c.rootPos)
			}
			if r.backends[c.b.name] != c.b {
				return fmt.Errorf("root %x[%d] belongs to a removed backend %q", k, i, c.b.name)
			}
		}
		indexed += len(list)
	}
	chains := 0
	for name, b := range r.backends {
		held, listed := 0, 0
		for id, s := range b.slots {
			if s.id != id || s.slot != s || s.b != b {
				return fmt.Errorf("%s slot %d: links wrong", name, id)
			}
			if err := checkIndexed(&s.chain); err != nil {
				return fmt.Errorf("%s slot %d: %w", name, id, err)
			}
			if (len(s.keys) > 0) != s.listed {
				return fmt.Errorf("%s slot %d: %d keys but listed %v", name, id, len(s.keys), s.listed)
			}
			held += len(s.keys)
			if len(s.keys) > 0 {
				chains++
				listed++
			}
		}
		n := 0
		var prev *slot
		for s := b.lru.head; s != nil; s = s.next {
			if s.prev != prev || b.slots[s.id] != s {
				return fmt.Errorf("%s: lru broken at slot %d", name, s.id)
			}
			prev, n = s, n+1
		}
		if prev != b.lru.tail || n != listed || b.lru.n != listed {
			return fmt.Errorf("%s: lru lists %d slots, %d hold keys", name, n, listed)
		}
		if held != b.held {
			return fmt.Errorf("%s: held %d, slots sum to %d", name, b.held, held)
		}
		if b.capacity > 0 && b.held > b.capacity {
			return fmt.Errorf("%s: held %d over capacity %d", name, b.held, b.capacity)
		}
		snapBlocks, snapBytes := 0, int64(0)
		for id, sn := range b.snaps {
			if sn.id != id || sn.snap != sn || sn.slot != nil {
				return fmt.Errorf("%s snapshot %q: links wrong", name, id)
			}
			if err := checkIndexed(&sn.chain); err != nil {
				return fmt.Errorf("%s snapshot %q: %w", name, id, err)
			}
			snapBlocks += len(sn.keys)
			snapBytes += sn.bytes
			if len(sn.keys) > 0 {
				chains++
			}
		}
		if snapBlocks != b.snapBlocks || snapBytes != b.snapBytes {
			return fmt.Errorf("%s: snapshot sums %d blocks %d bytes, recorded %d, %d", name, snapBlocks, snapBytes, b.snapBlocks, b.snapBytes)
		}
	}
	if chains != indexed {
		return fmt.Errorf("%d non-empty chains, %d indexed", chains, indexed)
	}
	return nil
}

func checkIndexed(c *chain) error {
	if len(c.keys) == 0 {
		if c.rootPos != -1 {
			return fmt.Errorf("empty chain at rootPos %d", c.rootPos)
		}
		return nil
	}
	if c.rootPos < 0 {
		return fmt.Errorf("chain of %d keys not indexed", len(c.keys))
	}
	return nil
}

func mustCheck(t testing.TB, r *Registry) {
	t.Helper()
	if err := r.check(); err != nil {
		t.Fatalf("invariant broken: %v", err)
	}
}

func mustRegistry(t testing.TB, backends ...BackendConfig) *Registry {
	t.Helper()
	r, err := New(Config{Backends: backends})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// blocksAt returns how many leading blocks of c the Lookup says loc holds in
// tier, 0 when absent.
func blocksAt(res Result, loc Location, tier Tier) int {
	for _, m := range res.Matches {
		if m.Location == loc && m.Tier == tier {
			return m.Blocks
		}
	}
	return 0
}
