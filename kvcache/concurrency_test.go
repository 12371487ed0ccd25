package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestConcurrentUse runs every mutating and reading method at once (run it
// with -race), then checks the invariants and that every slot's hold is a
// prefix of a chain that was recorded there.
func TestConcurrentUse(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	shared := tokens(100, 64) // a system prompt every conversation starts with
	var convs []Chain
	for i := range 8 {
		convs = append(convs, k.Tokens(append(append([]int(nil), shared...), tokens(uint64(101+i), 400)...)))
	}
	backends := []string{"a", "b", "c"}
	r := mustRegistry(t, BackendConfig{Name: "a", CapacityBlocks: 60}, BackendConfig{Name: "b"}, BackendConfig{Name: "c", CapacityBlocks: 100})

	const workers, rounds = 8, 400
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				c := convs[rng.IntN(len(convs))]
				loc := Location{backends[rng.IntN(len(backends))], rng.IntN(4)}
				var err error
				switch op := rng.IntN(10); {
				case op < 3:
					err = r.Record(loc, c.Prefix(rng.IntN(len(c.Keys)+1)))
				case op < 5:
					err = r.Correct(loc, c, rng.IntN(c.Length+50)-10)
				case op < 8:
					res := r.Lookup(c)
					for i, m := range res.Matches {
						if m.Blocks < 1 || m.Blocks > len(c.Keys) || i > 0 && m.Blocks > res.Matches[i-1].Blocks {
							err = fmt.Errorf("lookup returned %+v", res.Matches)
						}
					}
				case op < 9:
					id := fmt.Sprint(rng.IntN(3))
					if rng.IntN(2) == 0 {
						err = r.AddSnapshot(loc.Backend, id, c.Prefix(rng.IntN(len(c.Keys))), 100)
					} else if e := r.RemoveSnapshot(loc.Backend, id); e != nil && !isUnknownSnapshot(e) {
						err = e
					}
					_ = r.CountSnapshotRestore(loc.Backend)
				default:
					_ = r.Snapshot()
					_ = r.Held(loc)
					if rng.IntN(20) == 0 {
						err = r.Release(loc)
					}
					if rng.IntN(10) == 0 {
						err = r.SetBackend(BackendConfig{Name: "a", CapacityBlocks: 30 + rng.IntN(60)})
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustCheck(t, r)

	for _, name := range backends {
		for slot := range 4 {
			held := r.Held(Location{name, slot})
			if len(held) == 0 {
				continue
			}
			ok := false
			for _, c := range convs {
				ok = ok || sharedKeys(held, c.Keys) == len(held)
			}
			if !ok {
				t.Errorf("%s/%d holds %d keys that are no recorded chain's prefix", name, slot, len(held))
			}
		}
	}
}

func isUnknownSnapshot(err error) bool { return errors.Is(err, ErrUnknownSnapshot) }
