package memory

import (
	"slices"
	"strings"
	"testing"
)

func TestIndexSearch(t *testing.T) {
	turns := team(40)
	x := NewIndex(turns...)
	tests := []struct {
		name    string
		q       Query
		want    []string
		notWant []string
		maxHits int
	}{
		{name: "name only, paraphrased attribute", q: Query{Ask: "Which companion would greet me at Hugo's place?"},
			want: []string{"Hugo now also looks after a husky."}, notWant: []string{"Hugo has a tortoise at home."}},
		{name: "supersession", q: Query{Ask: "Where is Omar based now?"},
			want: []string{"Omar relocated again, this time to Quito."}, notWant: []string{"Omar moved to Lisbon last spring."}},
		{name: "plain bm25", q: Query{Ask: "ticket 17"}, want: []string{"Can you forward ticket 17 to Ravi?"}},
		{name: "k bound", q: Query{Ask: "Can you forward the ticket?", K: 3}, maxHits: 3},
		{name: "token bound", q: Query{Ask: "Can you forward the ticket?", Tokens: 20, Cost: func(t Turn) int { return 10 }}, maxHits: 2},
		{name: "before bound", q: Query{Ask: "Where is Omar based now?", Before: 10},
			want: []string{"Omar moved to Lisbon last spring."}, notWant: []string{"Omar relocated again, this time to Quito."}},
		{name: "window turns are not repeated", q: Query{Ask: "Where is Omar based now?", Window: []Turn{{Pos: 999, Role: "user", Text: "Omar relocated again, this time to Quito."}}},
			notWant: []string{"Omar relocated again, this time to Quito.", "Omar moved to Lisbon last spring."}},
		{name: "nothing to find", q: Query{Ask: "Write a haiku about autumn rain."}, maxHits: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits := x.Search(tc.q)
			var got []string
			for _, h := range hits {
				got = append(got, h.Text)
				if h.Handle != MakeHandle(h.Pos, h.Role, h.Text) || textAt(turns, h.Pos) != h.Text {
					t.Errorf("hit %+v: wrong handle or text for its position", h)
				}
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("hits lack %q; got %q", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(all, w) {
					t.Errorf("hits hold %q", w)
				}
			}
			switch {
			case tc.maxHits < 0 && len(hits) > 0:
				t.Errorf("want no hits, got %q", got)
			case tc.maxHits > 0 && len(hits) > tc.maxHits:
				t.Errorf("%d hits, want at most %d", len(hits), tc.maxHits)
			}
		})
	}
}

func TestHandleStable(t *testing.T) {
	a, b := MakeHandle(12, "user", "hello"), MakeHandle(12, "user", "hello!")
	if a != MakeHandle(12, "user", "hello") || a == b || !strings.HasPrefix(a, "m12.") {
		t.Fatalf("handles %q %q: want stable, distinct per text, prefixed by position", a, b)
	}
}

// A search costs its candidates through Query.Cost; under a CostKey an
// index asks once per turn, the hits are the same as without the key, and
// another key, or turns reordered by an Add, asks again.
func TestSearchRemembersCostsUnderTheirKey(t *testing.T) {
	turns := team(40)
	x := NewIndex(turns...)
	asked := map[int]int{}
	cost := func(tr Turn) int { asked[tr.Pos]++; return (len(tr.Text) + 3) / 4 }
	q := func(key string) Query {
		return Query{Ask: "Can you forward the ticket to Omar?", Tokens: 12, Cost: cost, CostKey: key}
	}
	plain := x.Search(q(""))
	if len(plain) == 0 || len(asked) == 0 {
		t.Fatalf("%d hits costing %d turns: want some of each", len(plain), len(asked))
	}
	clear(asked)
	first := x.Search(q("a"))
	second := x.Search(q("a"))
	if !slices.Equal(hitPositions(first), hitPositions(plain)) || !slices.Equal(hitPositions(second), hitPositions(plain)) {
		t.Fatalf("hits %v and %v under a key, %v without", hitPositions(first), hitPositions(second), hitPositions(plain))
	}
	for pos, n := range asked {
		if n != 1 {
			t.Errorf("turn %d costed %d times under one key, want once", pos, n)
		}
	}
	n := len(asked)
	clear(asked)
	x.Search(q("b"))
	if len(asked) != n {
		t.Errorf("another key costed %d turns, want all %d again", len(asked), n)
	}
	clear(asked)
	x.Add(Turn{Pos: -1, Role: "user", Text: "An early word about the ticket."}) // reorders the turns
	x.Search(q("b"))
	if len(asked) < n {
		t.Errorf("after a reorder %d turns costed, want at least %d", len(asked), n)
	}
}

func hitPositions(hits []Hit) []int {
	var out []int
	for _, h := range hits {
		out = append(out, h.Pos)
	}
	return out
}
