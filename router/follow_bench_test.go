package router

import (
	"fmt"
	"slices"
	"testing"

	"kvwin/kvcache"
)

// BenchmarkFollowEvent times what following a node costs per event in the
// common case, a turn's 64 tokens stored after a slot's N: the mirror
// applying it and the slot keyed again ("kept": from the keys of what the
// event kept; "whole": every block again, as before, beside it in the
// same run).
func BenchmarkFollowEvent(b *testing.B) {
	keyer, err := kvcache.NewKeyer(kvcache.Namespace{Model: "m"}, kvcache.KeyerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	const bt, turn = 16, 64
	for _, n := range []int{4096, 65536} {
		for _, mode := range []string{"kept", "whole"} {
			b.Run(fmt.Sprintf("%d/%s", n, mode), func(b *testing.B) {
				mirror := kvcache.NewMirror()
				if _, err := mirror.Apply(kvcache.JournalEvent{Seq: 1, Epoch: "e", Type: kvcache.EventSnapshot, BlockTokens: bt,
					Slots: []kvcache.SlotTokens{{Slot: 0, Tenant: "t", Tokens: tokenRange(0, n)}}}); err != nil {
					b.Fatal(err)
				}
				keyed := slotKeys{}
				keyed.chain(keyer, 0, "t", mirror.Slot(0).Tokens, 0)
				tail := tokenRange(1_000_000, turn)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					// The turn's tokens replace the last turn's: the slot stays N long.
					ev := kvcache.JournalEvent{Seq: uint64(i) + 2, Epoch: "e", Type: kvcache.EventStored, Slot: 0, Tenant: "t",
						FromBlock: (n - turn) / bt, Tokens: tail}
					if _, err := mirror.Apply(ev); err != nil {
						b.Fatal(err)
					}
					tokens := mirror.Slot(0).Tokens
					if mode == "whole" {
						_ = keyer.ForTenant("t").Tokens(slices.Clone(tokens)) // the clone the mirror made
						continue
					}
					keyed.chain(keyer, 0, "t", tokens, ev.FromBlock*bt)
				}
			})
		}
	}
}
