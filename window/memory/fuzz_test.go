package memory

import (
	"slices"
	"strings"
	"testing"
)

// FuzzIndexSearch: whatever the stored turns and the ask say (any bytes,
// any roles), a search does not panic, returns only held turns below
// Before and outside the window, each once, within K and Tokens, and the
// same hits again; and an index built one turn at a time (a live
// conversation) answers as one built from all its turns at once (a
// replica loading the branch from the store). CI runs it for 30 s
// (.ci/fuzz).
func FuzzIndexSearch(f *testing.F) {
	f.Add("Omar plays the banjo.\nNice!\nOmar swapped the banjo for the cello.\nCool.", "What does Omar play?", uint8(0), uint8(3), uint8(40), false)
	f.Add("we got a puppy\nshe is a golden retriever\nher name is biscuit\nlol\nwhat kind?", "what kind of puppy did you get", uint8(0b0111), uint8(0), uint8(0), true)
	f.Add("Caroline went to the LGBTQ support group on 7 May 2023.\nThat is brave.\n\n\nI'm Melanie, by the way.", "When did Caroline go to the support group?", uint8(0b1010), uint8(2), uint8(1), false)
	f.Fuzz(func(t *testing.T, history, ask string, roles, before, room uint8, statement bool) {
		var turns []Turn
		for i, text := range strings.Split(history, "\n") {
			if i >= 64 {
				break
			}
			role := roleUser
			if roles>>(i%8)&1 == 1 {
				role = "assistant"
			}
			turns = append(turns, Turn{Pos: i + 1, Role: role, Text: text})
		}
		window := turns[len(turns)/2:]
		held := turns[:len(turns)/2]
		q := Query{
			Ask: ask, Before: int(before % 70), Window: window, Statement: statement,
			K: int(room % 9), Tokens: int(room / 9 % 9), FirstTokens: int(room % 3), FillTokens: int(room / 27),
		}
		x := NewIndex(held...)
		hits := x.Search(q)
		inWindow := map[int]bool{}
		for _, w := range window {
			inWindow[w.Pos] = true
		}
		seen := map[int]bool{}
		for _, h := range hits {
			switch {
			case h.Pos < 1 || h.Pos > len(held) || held[h.Pos-1].Text != h.Text:
				t.Fatalf("hit %d %q is not a held turn", h.Pos, h.Text)
			case q.Before > 0 && h.Pos >= q.Before:
				t.Fatalf("hit %d at or past Before %d", h.Pos, q.Before)
			case inWindow[h.Pos] || seen[h.Pos]:
				t.Fatalf("hit %d in the window or twice", h.Pos)
			}
			seen[h.Pos] = true
		}
		if q.K > 0 && len(hits) > q.K {
			t.Fatalf("%d hits past K %d", len(hits), q.K)
		}
		if q.Tokens > 0 && len(hits) > q.Tokens {
			t.Fatalf("%d hits of 1 token each past Tokens %d", len(hits), q.Tokens)
		}
		same := func(a, b []Hit) bool {
			return slices.EqualFunc(a, b, func(a, b Hit) bool { return a.Pos == b.Pos && a.Score == b.Score && a.Fact == b.Fact })
		}
		if again := x.Search(q); !same(hits, again) {
			t.Fatalf("the same search found %v, then %v", hitTexts(hits), hitTexts(again))
		}
		live := NewIndex()
		for _, tn := range held {
			live.Add(tn)
		}
		if got := live.Search(q); !same(hits, got) {
			t.Fatalf("built a turn at a time: %v; at once: %v", hitTexts(got), hitTexts(hits))
		}
	})
}
