package memory

import (
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
