package kvcache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// residentFleet returns a registry of 4 backends × 64 slots, each slot holding
// an 8,192-token conversation (512 blocks), plus snaps snapshots per backend;
// every chain starts with the same 1,024-token system prompt, which is the
// worst case for Lookup (every chain is a holder of the first key). It also
// returns the prompt of slot a/7 extended by one more turn.
func residentFleet(b *testing.B, k *Keyer, snaps int) (*Registry, []int) {
	b.Helper()
	system := tokens(1, 1024)
	conv := func(seed uint64) []int {
		return append(append(make([]int, 0, 8192), system...), tokens(seed, 8192-1024)...)
	}
	r := mustRegistry(b)
	var query []int
	for bi, name := range []string{"a", "b", "c", "d"} {
		if err := r.SetBackend(BackendConfig{Name: name}); err != nil {
			b.Fatal(err)
		}
		for s := range 64 {
			ts := conv(uint64(1000*bi + s + 2))
			if err := r.Record(Location{name, s}, k.Tokens(ts)); err != nil {
				b.Fatal(err)
			}
			if name == "a" && s == 7 {
				query = append(ts[:8000:8000], tokens(99, 192)...) // 8,192 tokens, 500 blocks shared
			}
		}
		for s := range snaps {
			c := k.Tokens(conv(uint64(100000*(bi+1) + s)))
			if err := r.AddSnapshot(name, fmt.Sprint(s), c, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	return r, query
}

// BenchmarkKeysLookup8k: an 8,192-token prompt keyed and looked up against
// 256 resident slot chains (131 k blocks), and against those plus 4,000
// snapshot chains (2.2 M blocks).
func BenchmarkKeysLookup8k(b *testing.B) {
	k := mustKeyer(b, testNS, KeyerConfig{})
	b.Run("keys", func(b *testing.B) {
		query := tokens(1, 8192)
		b.SetBytes(int64(len(query)) * 4)
		for b.Loop() {
			_ = k.Tokens(query)
		}
	})
	for _, snaps := range []int{0, 1000} {
		b.Run(fmt.Sprintf("chains=%d", 256+4*snaps), func(b *testing.B) { benchLookup(b, k, snaps) })
	}
}

func benchLookup(b *testing.B, k *Keyer, snaps int) {
	r, query := residentFleet(b, k, snaps)
	c := k.Tokens(query)
	if got := blocksAt(r.Lookup(c), Location{"a", 7}, TierSlot); got != 500 {
		b.Fatalf("a/7 holds %d blocks of the query, want 500", got)
	}
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			_ = r.Lookup(c)
		}
	})
	b.Run("keys+lookup", func(b *testing.B) {
		for b.Loop() {
			_ = r.Lookup(k.Tokens(query))
		}
	})
	b.Run("keys+lookup-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = r.Lookup(k.Tokens(query))
			}
		})
	})
}

// BenchmarkCorrectRecord8k: the writes after one turn of an 8k conversation
// in a registry under capacity pressure (every Record evicts).
func BenchmarkCorrectRecord8k(b *testing.B) {
	k := mustKeyer(b, testNS, KeyerConfig{})
	r := mustRegistry(b, BackendConfig{Name: "a", CapacityBlocks: 16 * 512})
	convs := make([]Chain, 32)
	for i := range convs {
		convs[i] = k.Tokens(tokens(uint64(i), 8192))
	}
	i := 0
	for b.Loop() {
		c, loc := convs[i%len(convs)], Location{"a", i % 24}
		if err := r.Correct(loc, c, 4000); err != nil {
			b.Fatal(err)
		}
		if err := r.Record(loc, c); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkResidentMemory measures the heap a million resident blocks take,
// as 1,954 chains of 512 blocks (8k-token conversations) across 8 backends,
// held by slots or by snapshots.
func BenchmarkResidentMemory(b *testing.B) {
	const blocks, perChain = 1 << 20, 512
	for _, tier := range []Tier{TierSlot, TierSnapshot} {
		b.Run(tier.String(), func(b *testing.B) {
			var perBlock float64
			for b.Loop() {
				rng := rand.New(rand.NewPCG(1, 2))
				keys := make([]Key, perChain)
				before := heapAlloc()
				r := mustRegistry(b)
				for bi := range 8 {
					if err := r.SetBackend(BackendConfig{Name: fmt.Sprint("backend-", bi)}); err != nil {
						b.Fatal(err)
					}
				}
				for i := range blocks / perChain {
					for j := range keys {
						keys[j] = Key(rng.Uint64())
					}
					c := Chain{Keys: keys, Length: perChain * 16, BlockSize: 16}
					name := fmt.Sprint("backend-", i%8)
					var err error
					if tier == TierSlot {
						err = r.Record(Location{name, i / 8}, c)
					} else {
						err = r.AddSnapshot(name, fmt.Sprint(i), c, 1)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				after := heapAlloc()
				held := (blocks / perChain) * perChain
				perBlock = float64(after-before) / float64(held)
				runtime.KeepAlive(r)
			}
			b.ReportMetric(perBlock, "bytes/block")
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
