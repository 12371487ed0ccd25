package memory

import (
	"sort"
	"strings"
)

// Query asks for the evicted turns an ask needs.
type Query struct {
	// Ask is the text of the message being answered.
	Ask string
	// Asker is the ask's role; "I" and "my" in the ask mean it. Default user.
	Asker string
	// Before bounds the candidates to turns with Pos < Before (the cut);
	// 0 means no bound.
	Before int
	// Chain is the asking history's chain: Chain[i] is Link over its
	// first i messages (Chain[0] = 0). The Store returns only turns on it:
	// a turn at position p whose Link(Parent, Role, Text) is Chain[p+1].
	// A Store search without it finds nothing; an Index ignores it (an
	// Index holds one history's turns).
	Chain []uint64
	// Window holds the turns the window already carries (sinks, kept
	// history, earlier packets). They are never returned, their texts are
	// not repeated, and their statements supersede older candidates.
	Window []Turn
	// K bounds the number of hits; Tokens bounds their summed Cost.
	K      int
	Tokens int
	// Cost is the tokens a hit takes in a packet. Nil counts 1 per hit.
	Cost func(Turn) int
}

// Hit is one turn chosen for a packet.
type Hit struct {
	Turn
	Score float64 // lexical relevance (BM25 over the ask)
	Fact  bool    // a current statement about a name in the ask
}

// Reasons a turn can be passed over; counted for tests and tuning.
type searchStats struct {
	superseded, duplicate, inWindow int
}

// rank is the retrieval every memory shares: the store and the in-memory
// index differ only in where candidates and statistics come from.
//
// Order: current facts about a name the ask mentions come first (the ask
// "Who does Omar work as?" shares no word but the name with "Org change:
// Omar became release manager"); then turns by BM25 over the ask; ties go to
// the later turn. Superseded turns, turns already in the window and texts
// the window already holds are left out. Hits are returned best first.
func rank(f *facts, q Query, lexical []matched, n int, avgLen float64) ([]Hit, searchStats) {
	f.finish()
	var stats searchStats
	qterms := queryTerms(q.Ask)
	scores := bm25(lexical, qterms, n, avgLen)

	inWindow := map[int]bool{}
	windowText := map[string]bool{}
	for _, t := range q.Window {
		inWindow[t.Pos] = true
		windowText[normalText(t.Text)] = true
	}
	later := f.windowFacts(q.Window)

	type cand struct {
		hit Hit
	}
	byPos := make(map[int]*cand, len(lexical))
	for i, m := range lexical {
		if scores[i] > 0 {
			byPos[m.turn.Pos] = &cand{hit: Hit{Turn: m.turn, Score: scores[i]}}
		}
	}
	for _, subj := range f.askSubjects(q.Ask, q.Asker) {
		for _, pos := range f.bySubject[subj] {
			if q.Before > 0 && pos >= q.Before {
				continue
			}
			c := byPos[pos]
			if c == nil {
				c = &cand{hit: Hit{Turn: Turn{Pos: pos, Role: f.roles[pos], Text: f.texts[pos]}}}
				byPos[pos] = c
			}
			c.hit.Fact = true
		}
	}

	ranked := make([]Hit, 0, len(byPos))
	for _, c := range byPos {
		ranked = append(ranked, c.hit)
	}
	sort.Slice(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		if a.Fact != b.Fact {
			return a.Fact
		}
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.Pos > b.Pos
	})
	// Walk best first and check each candidate only when it is reached: an
	// ask made of common words can match thousands of turns, and only the
	// first few that pass matter.
	var out []Hit
	seen := map[string]bool{}
	used := 0
	for i, h := range ranked {
		if (q.K > 0 && len(out) >= q.K) || i >= maxExamined {
			break
		}
		text := normalText(h.Text)
		switch {
		case inWindow[h.Pos]:
			stats.inWindow++
			continue
		case windowText[text] || seen[text]:
			stats.duplicate++
			continue
		case f.superseded(h.Pos, q.Before, later):
			stats.superseded++
			continue
		}
		h.Turn = withHandle(h.Turn)
		cost := 1
		if q.Cost != nil {
			cost = q.Cost(h.Turn)
		}
		if q.Tokens > 0 && used+cost > q.Tokens {
			continue // a shorter hit further down may still fit
		}
		seen[text] = true
		used += cost
		out = append(out, h)
	}
	return out, stats
}

// maxExamined bounds the candidates one search checks.
const maxExamined = 4096

func normalText(s string) string { return strings.Join(terms(s), " ") }
