package memory

import (
	"fmt"
	"testing"
)

// TestExplain: Explain says why each turn is or is not a hit, and agrees
// with Search on the hits.
func TestExplain(t *testing.T) {
	texts := []string{
		"Omar plays the banjo in the evening band.", "Nice.",
		"The boiler pressure dropped again.", "Noted.",
		"Omar now plays the cello, not the banjo.", "Good for him.",
		"A long note about the garden shed and the compost heap and the fence.", "Okay.",
		"The garden shed needs paint.", "Sure.",
	}
	for i := 0; i < 30; i++ {
		texts = append(texts, fmt.Sprintf("Routine check %d passed.", i), "Okay.")
	}
	x := NewIndex(chatTurns(texts...)...)
	pos := func(i int) int { return i + 3 } // chatTurns starts at 3
	q := Query{Ask: "Which instrument does Omar play?"}
	hits := x.Search(q)
	got := x.Explain(q, []int{pos(4), pos(30), 99})
	want := []Miss{MissNone, MissNotRetrieved, MissNotHeld}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("turn %d: %v, want %v (hits %q)", i, got[i], want[i], hitTexts(hits))
		}
	}
	for _, h := range hits {
		if m := x.Explain(q, []int{h.Pos})[0]; m != MissNone {
			t.Errorf("hit %q explained as %v", h.Text, m)
		}
	}
	// A room for one short line: the long match is cut, the short one fits.
	q = Query{Ask: "What about the garden shed?", Tokens: 10, Cost: func(t Turn) int { return len(t.Text) / 4 }}
	if got := x.Explain(q, []int{pos(6), pos(8)}); got[0] != MissCut || got[1] != MissNone {
		t.Errorf("garden shed: %v, want [%v %v] (hits %q)", got, MissCut, MissNone, hitTexts(x.Search(q)))
	}
	// An ask the window's last exchange answers as well: gated.
	q = Query{Ask: "What about the garden shed?", Window: []Turn{{Pos: 80, Role: "user", Text: "The garden shed needs paint."}}}
	if got := x.Explain(q, []int{pos(8)}); got[0] != MissGated {
		t.Errorf("an ask the window answers: %v, want %v", got[0], MissGated)
	}
}
