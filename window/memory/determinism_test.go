package memory

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// A search is a function of its history and query: the same on every
// replica and every call, or a prompt that changes with no change in its
// conversation loses its reuse. The window's best match is compared with
// the memory's for equality (an ask the window answers as well as the
// memory could gets no lexical hits), so both must sum the ask's terms in
// one order: summed in a map's order, a window turn that says what a
// stored turn says scored a rounding above or below it, and the packet
// came and went from call to call (30 of these 40 conversations).
func TestSearchIsTheSameEveryCall(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	words := strings.Fields("ledger invoice warehouse lisbon porto faro quarterly reconciliation flagged seven audit vendor freight customs tariff pallet courier depot manifest rebate clause penalty storage crate dock forklift barcode shipment refund")
	pick := func(n int) string {
		var b []string
		for i := 0; i < n; i++ {
			b = append(b, words[r.Intn(len(words))])
		}
		return strings.Join(b, " ")
	}
	same := func(a, b Hit) bool { return a.Pos == b.Pos && a.Text == b.Text && a.Score == b.Score }
	for trial := 0; trial < 40; trial++ {
		said := pick(12)
		var turns []Turn
		for i := 0; i < 80; i++ {
			text := pick(3 + r.Intn(10))
			if i == 30 {
				text = said
			}
			turns = append(turns, Turn{Pos: i, Role: []string{"user", "assistant"}[i%2], Text: text})
		}
		turns, _ = Linked(0, turns)
		// The window's last exchange says what turn 30 said.
		q := Query{Ask: said + "?", Window: []Turn{{Pos: 80, Role: "user", Text: said}, {Pos: 81, Role: "assistant", Text: "noted"}},
			K: 32, Tokens: 4096, FillTokens: 512, Cost: func(t Turn) int { return len(t.Text) / 4 }}
		x := NewIndex(turns...)
		first := x.Search(q)
		for call := 1; call < 30; call++ {
			if got := x.Search(q); !slices.EqualFunc(got, first, same) {
				t.Fatalf("conversation %d, call %d: %d hits, the first call %d", trial, call, len(got), len(first))
			}
		}
	}
}
