package memory

import (
	"fmt"
	"testing"
)

// Once the room is spent, the walk looks at no more than maxPassedOver
// candidates for a shorter one that still fits: a short match ranked
// below that many longer ones is passed over with them, one above them is
// taken.
func TestWalkPassesOverABoundedNumber(t *testing.T) {
	for _, long := range []int{maxPassedOver / 2, maxPassedOver + 8} {
		var turns []Turn
		add := func(role, text string) {
			turns = append(turns, Turn{Pos: len(turns), Role: role, Text: text})
		}
		for i := 0; i < 200; i++ {
			add("user", fmt.Sprintf("we talked about the weather and the long drive home, day %d of the trip", i))
		}
		// The best match first, then long ones that rank after it and cannot
		// fit once it is taken, then a short one that would.
		add("user", "garden shed garden shed garden shed garden")
		for i := 0; i < long; i++ {
			add("user", fmt.Sprintf("garden shed garden shed garden shed, number %d", i))
		}
		for i := 0; i < 100; i++ {
			add("user", fmt.Sprintf("nothing to see in this one either, we only walked on, day %d of the trip", i))
		}
		add("user", "garden shed")
		x := NewIndex(turns...)
		q := Query{Ask: "garden shed", Tokens: 14, Cost: func(t Turn) int { return (len(t.Text) + 3) / 4 }}
		hits := x.Search(q)
		short := false
		for _, h := range hits {
			short = short || h.Text == "garden shed"
		}
		if want := long <= maxPassedOver; short != want || len(hits) == 0 || hits[0].Text != turns[200].Text {
			t.Errorf("%d long matches: hits %q; want the best first and the short one %v", long, hitTexts(hits), want)
		}
		// Explain tells the short one as the search left it.
		want := MissNone
		if long > maxPassedOver {
			want = MissCut
		}
		if got := x.Explain(q, []int{len(turns) - 1})[0]; got != want {
			t.Errorf("%d long matches: the short one explained as %v, want %v", long, got, want)
		}
	}
}
