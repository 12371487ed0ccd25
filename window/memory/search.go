package memory

import (
	"cmp"
	"slices"
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
	// FirstTokens, if larger, bounds the best hit alone: an ask whose
	// answer is one long turn gets it when there is room for it.
	K           int
	Tokens      int
	FirstTokens int
	// Cost is the tokens a hit takes in a packet. Nil counts 1 per hit.
	Cost func(Turn) int
	// Statement marks an ask that asks for nothing (not a question or a
	// request): nothing says an old turn is needed, so its lexical hits
	// must be beyond chance as the best match of all the turns searched
	// (see chanceBound), not only one turn at a time. The zero value
	// serves the ask as a question.
	Statement bool
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

// Retrieval constants. Each is set by a rule, not fitted to data:
const (
	// cutoff: a hit must score at least this share of the best match. Half
	// is the midpoint between "only the best" and "anything that shares a
	// word"; a packet sized by it grows with the number of turns that
	// match about as well as the best one (one for a pointed question,
	// five for one whose answer is scattered).
	cutoff = 0.5
	// neighbourShare: the turn before and the turn after a hit rank at
	// this share of its score, the same share as the cutoff: a
	// conversation answers in the next turn and asks in the one before, so
	// a neighbour is worth as much as the weakest hit that still counts.
	neighbourShare = cutoff
	// maxExamined bounds the candidates one search checks: a packet holds
	// tens of turns, and an ask of common words can match thousands.
	maxExamined = 1024
)

// search ranks the held turns below q.Before for q. Callers hold x.mu.
//
// Steps: BM25 over the ask's stems with this history's statistics, plus
// the parties' names as terms of the turns they said; current statements
// about a name the ask mentions rank like the best turn that names it; if
// the window already holds a match at least as good as the best in memory,
// the ask is about what is in view and gets only those statements;
// otherwise hits within cutoff of the best too; then the neighbours of
// each at neighbourShare of its score, best first; turns in the window, repeated texts and statements
// replaced by one the packet or window carries are left out; the token
// budget and K bound the rest.
func (x *Index) search(q Query) ([]Hit, searchStats) {
	var stats searchStats
	limit := x.limit(q.Before)
	if limit == 0 {
		return nil, stats
	}
	f := x.facts
	f.finish()
	avg := float64(x.prefix[limit]) / float64(limit)
	if avg <= 0 {
		avg = 1
	}
	qstems := x.contentStems(q.Ask)
	scores := x.lexical(qstems, limit, avg)
	x.speakerTerms(q.Ask, limit, avg, scores)
	// An ask gets lexical hits only if some turn matches it beyond chance
	// once the ask's number of terms found in the history is allowed for
	// (the more terms, the likelier a chance match of one: Bonferroni);
	// a statement's match must also be beyond chance as the best of the
	// limit turns searched (chanceBound). Without one, like an ask about
	// what is in view, it gets only the statements about the names it
	// mentions.
	best, beyond := 0.0, false
	present := x.present(qstems, limit)
	ask := x.typicalShare() / float64(max(present, 1))
	if q.Statement {
		ask = min(ask, chanceBound(limit, present))
	}
	subjects := f.askSubjects(q.Ask, q.Asker)
	own := 0.0 // the best match that is not a statement about someone else
	for _, d := range scores.touched {
		best = max(best, scores.get(d))
		if !f.aboutOthers(x.turns[d].Pos, subjects) {
			own = max(own, scores.get(d))
		}
		beyond = beyond || relevant(scores.mass[d], ask)
	}
	if best == 0 {
		return nil, stats
	}
	// An ask the window answers as well as the memory could is about what
	// is in view: it gets no lexical hits, only the current statements
	// about the names it mentions, which the window may lack.
	inView := x.windowBest(q, qstems, limit, avg) >= best

	type cand struct {
		doc   int32
		score float64
		fact  bool
	}
	var ranked []cand
	at := map[int32]int{}
	add := func(d int32, sc float64, fact bool) {
		if i, ok := at[d]; ok {
			ranked[i].score = max(ranked[i].score, sc)
			ranked[i].fact = ranked[i].fact || fact
			return
		}
		at[d] = len(ranked)
		ranked = append(ranked, cand{doc: d, score: sc, fact: fact})
	}
	for _, d := range scores.touched {
		if sc := scores.get(d); sc >= cutoff*best && !inView && beyond {
			add(d, sc, false)
		}
	}
	for _, subj := range subjects {
		// A statement about the subject ranks like the best turn that
		// names it: never above the ask's best match, never below the
		// chatter that merely mentions the name.
		nameBest := 0.0
		for _, p := range x.post[x.stems.stem(strings.TrimPrefix(subj, "@"))] {
			if int(p.doc) < limit {
				nameBest = max(nameBest, scores.get(p.doc))
			}
		}
		if nameBest < cutoff*own {
			// No statement can rank by the name: those that count are
			// already candidates by their own score.
			continue
		}
		for _, pos := range f.bySubject[subj] {
			d, ok := x.byPos[pos]
			if !ok || d >= limit {
				continue
			}
			if sc := max(scores.get(int32(d)), nameBest); sc >= cutoff*own {
				add(int32(d), sc, true)
			}
		}
	}
	if len(ranked) > maxExamined {
		// Only the best can be reached: keep them before the neighbours.
		ranked = topK(ranked, maxExamined, func(c cand) float64 { return c.score })
		clear(at)
		for i, c := range ranked {
			at[c.doc] = i
		}
	}
	for i, n := 0, len(ranked); i < n; i++ {
		c := ranked[i]
		for _, d := range []int32{c.doc - 1, c.doc + 1} {
			// Only a true neighbour: the next position, not a gap.
			if d >= 0 && int(d) < limit && abs(x.turns[d].Pos-x.turns[c.doc].Pos) == 1 {
				add(d, c.score*neighbourShare, false)
			}
		}
	}
	slices.SortFunc(ranked, func(a, b cand) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.doc, a.doc)
	})
	if len(ranked) > maxExamined {
		ranked = ranked[:maxExamined]
	}

	inWindow := map[int]bool{}
	windowText := map[string]bool{}
	for _, t := range q.Window {
		inWindow[t.Pos] = true
		windowText[normalText(t.Text)] = true
	}
	later := f.windowFacts(q.Window)
	found := make([]int, len(ranked))
	for i, c := range ranked {
		found[i] = x.turns[c.doc].Pos
	}
	among := f.factsAt(found)

	// Walk best first and check each candidate only when it is reached: an
	// ask made of common words can match thousands of turns, and only the
	// first few that pass matter.
	var out []Hit
	seen := map[string]bool{}
	used := 0
	for _, c := range ranked {
		if q.K > 0 && len(out) >= q.K {
			break
		}
		t := x.turns[c.doc]
		text := normalText(t.Text)
		switch {
		case inWindow[t.Pos]:
			stats.inWindow++
			continue
		case windowText[text] || seen[text]:
			stats.duplicate++
			continue
		case f.superseded(t.Pos, among, later, subjects):
			stats.superseded++
			continue
		}
		cost := 1
		if q.Cost != nil {
			cost = q.Cost(t)
		}
		if q.Tokens > 0 && used+cost > q.Tokens && !(len(out) == 0 && cost <= q.FirstTokens) {
			continue // a shorter hit further down may still fit
		}
		seen[text] = true
		used += cost
		out = append(out, Hit{Turn: t, Score: c.score, Fact: c.fact})
	}
	return out, stats
}

func abs(n int) int { return max(n, -n) }

// topK returns the k elements of xs with the highest key, in no order,
// reordering xs (quickselect: linear on average, where sorting thousands
// of candidates to keep a thousand would not be).
func topK[T any](xs []T, k int, key func(T) float64) []T {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		p := key(xs[(lo+hi)/2])
		i, j := lo, hi
		for i <= j {
			for key(xs[i]) > p {
				i++
			}
			for key(xs[j]) < p {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return xs[:k]
		}
	}
	return xs[:k]
}

func normalText(s string) string { return strings.Join(terms(s), " ") }
