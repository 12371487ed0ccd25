package memory

import (
	"math"
	mathbits "math/bits"
	"slices"
	"sort"
)

// lexical returns the BM25 score of every held turn below limit that holds
// a stem of the ask, with the statistics of those turns only: a history's
// scores never depend on another history's turns. Callers hold x.mu.
//
// A stem more than maxExamined of those turns hold is common: it adds to
// the turns a rarer stem of the ask reaches, and brings in only the newest
// maxExamined of its own (see candidateTurns); the rest of its turns are
// as good as those by every measure a search has, a word most turns hold
// telling nothing of which, and a search examines no more than
// maxExamined anyway. So a search's work is bounded by the ask's rare
// stems' turns and maxExamined per stem, not by the history's length; a
// history where no stem of the ask is that common scores as before.
func (x *Index) lexical(qstems []string, limit int, avg float64) *scoreboard {
	sb := &x.board
	sb.reset(len(x.turns))
	common := false
	for _, term := range qstems {
		common = common || len(x.postings(term, limit)) > maxExamined
	}
	if common {
		sb.bounded = x.candidateTurns(sb, qstems, limit, sb.bounded)
	}
	for _, term := range qstems { // in order: the same sums on every replica
		ps := x.postings(term, limit)
		if len(ps) == 0 {
			continue
		}
		idf, surprise := bm25IDF(limit, len(ps)), chanceIDF(limit, len(ps))
		if len(ps) <= maxExamined {
			for _, p := range ps {
				sb.add(p.doc, idf*bm25TF(float64(p.tf), float64(x.lens[p.doc]), avg))
				sb.mass[p.doc] += surprise
			}
			continue
		}
		sb.eachHeld(len(ps), func(i int) int32 { return ps[i].doc }, func(i int) {
			p := ps[i]
			sb.add(p.doc, idf*bm25TF(float64(p.tf), float64(x.lens[p.doc]), avg))
			sb.mass[p.doc] += surprise
		})
	}
	sb.common = common
	return sb
}

// candidateTurns returns, ascending and into out, the turns below limit a
// search of qstems scores when one of them is common (see lexical): every
// turn of a stem at most maxExamined turns hold, the newest maxExamined of
// a commoner one. It marks them in sb.held (sb.eachHeld reads the marks;
// reset clears them). Callers hold x.mu.
//
// The stems' lists ascend, so the marks, read from the earliest turn
// marked, give the turns in order with no sort: an ask of common words
// gathers its maxExamined newest turns once per stem, mostly the same
// ones, and sorting them all was most of scoring them. Reading the marks
// costs a word per 64 turns from the earliest marked (1,563 words at
// 100,000 turns), nothing beside scoring a thousand turns.
func (x *Index) candidateTurns(sb *scoreboard, qstems []string, limit int, out []int32) []int32 {
	if words := (limit + 63) / 64; len(sb.held) < words {
		sb.held = make([]uint64, words)
	}
	first := int32(limit)
	for _, term := range qstems {
		ps := x.postings(term, limit)
		tail := ps[max(len(ps)-maxExamined, 0):]
		if len(tail) == 0 {
			continue
		}
		first = min(first, tail[0].doc)
		for _, p := range tail {
			sb.held[p.doc>>6] |= 1 << (p.doc & 63)
		}
	}
	for w := int(first) >> 6; w < (limit+63)/64; w++ {
		for bits := sb.held[w]; bits != 0; bits &= bits - 1 {
			out = append(out, int32(w<<6+mathbits.TrailingZeros64(bits)))
		}
	}
	return out
}

// eachHeld calls fn(i) for each i < n whose doc(i) is a turn of
// sb.bounded (marked in sb.held), ascending; doc must ascend with i. From
// the first bounded turn on, it reads doc and tests the mark where that
// costs no more than looking each bounded turn up by binary search, which
// it does otherwise (a list far longer than the bounded turns), so it
// costs about len(sb.bounded)·log n at most, however long doc is.
func (sb *scoreboard) eachHeld(n int, doc func(int) int32, fn func(int)) {
	if len(sb.bounded) == 0 {
		return
	}
	lo, hi := sb.bounded[0], sb.bounded[len(sb.bounded)-1]
	from := sort.Search(n, func(i int) bool { return doc(i) >= lo })
	if n-from <= 8*len(sb.bounded) {
		for i := from; i < n; i++ {
			d := doc(i)
			if d > hi {
				return
			}
			if sb.held[d>>6]&(1<<(d&63)) != 0 {
				fn(i)
			}
		}
		return
	}
	j := from
	for _, d := range sb.bounded {
		j += sort.Search(n-j, func(i int) bool { return doc(j+i) >= d })
		if j == n {
			return
		}
		if doc(j) == d {
			fn(j)
		}
	}
}

// passageScores sets the score of every long turn in sb to that of its
// passage that matches the ask best, by the rule that passage is quoted by
// (passageOf): the weights (askWeights) of the distinct ask stems it
// holds. Ranked whole, a long turn outranked the short turns that answer,
// for holding the ask's words somewhere in a thousand tokens, and was then
// quoted by a passage that held few of them. A turn none of whose
// passages holds an ask stem keeps its score. The stems a turn holds in
// every passage (pall) add to every passage alike: they are summed once
// per turn, as its base, and the passages' own stems on top. Callers hold
// x.mu.
func (x *Index) passageScores(sb *scoreboard, qstems []string, weight map[string]float64, limit int) {
	if len(x.pdoc) == 0 {
		return
	}
	if len(sb.pacc) < len(x.pdoc) {
		sb.pacc = make([]float64, len(x.pdoc))
	}
	if len(sb.pbest) < len(x.turns) {
		sb.pbest, sb.pbase = make([]float64, len(x.turns)), make([]float64, len(x.turns))
		sb.pbid, sb.pquote = make([]int32, len(x.turns)), make([]int32, len(x.turns))
	}
	touched, docs := sb.ptouched[:0], sb.pdocs[:0]
	for _, term := range qstems { // in order: the same sums on every replica
		w := weight[term] // once per term, not per posting: a common word has one per passage
		all, post := x.pall[term], x.ppost[term]
		if sb.common && len(x.postings(term, limit)) > maxExamined {
			// A common stem adds to the turns the search scored (lexical).
			sb.eachHeld(len(all), func(i int) int32 { return all[i] }, func(i int) {
				if d := all[i]; sb.pbase[d] == 0 {
					docs = append(docs, d)
				}
				sb.pbase[all[i]] += w
			})
			for _, d := range sb.bounded {
				pt, ok := x.long[d]
				if !ok {
					continue
				}
				end := pt.first + int32(len(pt.stems))
				i, _ := slices.BinarySearch(post, pt.first)
				for ; i < len(post) && post[i] < end; i++ {
					if sb.pacc[post[i]] == 0 {
						touched = append(touched, post[i])
					}
					sb.pacc[post[i]] += w
				}
			}
			continue
		}
		for _, d := range all {
			if int(d) >= limit {
				break // ascending: the rest are later turns'
			}
			if sb.pbase[d] == 0 {
				docs = append(docs, d)
			}
			sb.pbase[d] += w
		}
		for _, id := range post {
			if int(x.pdoc[id]) >= limit {
				break
			}
			if sb.pacc[id] == 0 {
				touched = append(touched, id)
			}
			sb.pacc[id] += w
		}
	}
	for _, id := range touched {
		d := x.pdoc[id]
		if sb.pbest[d] == 0 && sb.pbase[d] == 0 {
			docs = append(docs, d)
		}
		// The best passage, the earlier on ties (as passageOf quotes).
		if a := sb.pacc[id]; a > sb.pbest[d] || a == sb.pbest[d] && id < sb.pbid[d] {
			sb.pbest[d], sb.pbid[d] = a, id
		}
		sb.pacc[id] = 0
	}
	for _, d := range docs {
		if sb.acc[d] > 0 {
			sb.acc[d] = sb.pbase[d] + sb.pbest[d]
			// The passage it ranks by is the one quoted: the first where
			// only the stems of every passage match.
			i := int32(0)
			if sb.pbest[d] > 0 {
				i = sb.pbid[d] - x.long[d].first
			}
			sb.pquote[d] = i + 1
			sb.pquoted = append(sb.pquoted, d)
		}
		sb.pbest[d], sb.pbase[d] = 0, 0
	}
	sb.ptouched, sb.pdocs = touched, docs // kept for the next search's scratch
}

// scoreboard accumulates scores per turn in a dense array an Index reuses
// from search to search (under its lock), so a search over 100,000 turns
// allocates no map of them.
type scoreboard struct {
	acc     []float64
	mass    []float64 // Σ chanceIDF of the ask's terms a turn holds
	touched []int32   // turns with a score, in first-touched order
	pacc    []float64 // per passage id (passageScores), zero between searches
	pbest   []float64 // per turn (passageScores), zero between searches
	pbase   []float64 // per turn (passageScores), zero between searches
	pbid    []int32   // per turn: the id of its best passage (passageScores)
	// pquote holds, per long turn a search scored by passage, 1 + the
	// index of the passage it ranks by, for passageOf to quote; 0 for
	// every other turn. reset clears the turns in pquoted.
	pquote, pquoted []int32
	// ptouched and pdocs are passageScores' lists, kept for their room.
	ptouched, pdocs []int32
	// common says a stem of the ask is common (see lexical), and bounded
	// lists, ascending, the turns the search then scores.
	common  bool
	bounded []int32
	held    []uint64 // a bit per turn: set for the turns of bounded
}

func (sb *scoreboard) reset(n int) {
	for _, d := range sb.touched {
		sb.acc[d], sb.mass[d] = 0, 0
	}
	for _, d := range sb.pquoted {
		sb.pquote[d] = 0
	}
	sb.pquoted = sb.pquoted[:0]
	sb.touched = sb.touched[:0]
	for _, d := range sb.bounded {
		sb.held[d>>6] = 0
	}
	sb.bounded = sb.bounded[:0]
	if len(sb.acc) < n {
		sb.acc, sb.mass = make([]float64, n), make([]float64, n)
	}
}

func (sb *scoreboard) add(d int32, v float64) {
	if sb.acc[d] == 0 {
		sb.touched = append(sb.touched, d)
	}
	sb.acc[d] += v
}

func (sb *scoreboard) get(d int32) float64 { return sb.acc[d] }

// postings returns term's postings among the turns below limit.
func (x *Index) postings(term string, limit int) []posting {
	ps := x.post[term]
	return ps[:sort.Search(len(ps), func(i int) bool { return int(ps[i].doc) >= limit })]
}

func bm25IDF(n, df int) float64 {
	return math.Log(1 + (float64(n-df)+0.5)/(float64(df)+0.5))
}

// chanceIDF is log((n+1)/(df+1)): the surprise of a term found in df of
// n turns and in the ask. The ask is one more turn of the conversation and
// it holds the term: a term picked because the ask says it has been said
// df+1 times in n+1 turns, and leaving the ask out would make every ask
// term look rarer than it is (a word said once before and once in the ask
// is a word said twice). Summed over the ask's terms a turn holds, it is
// the log of how many times rarer that combination is than one turn in
// n+1, were the terms scattered at random (see relevantMass).
func chanceIDF(n, df int) float64 {
	return math.Log(float64(n+1) / float64(df+1))
}

// typicalShare returns the share of turns that hold the term of a word
// picked at random from the held text: the mean of df/n over the terms,
// weighted by how often each is said (kept up to date by reindex).
// Callers hold x.mu.
func (x *Index) typicalShare() float64 {
	if x.said == 0 || len(x.turns) == 0 {
		return 1
	}
	return x.weighted / x.said / float64(len(x.turns))
}

// relevantMass returns the summed chanceIDF mass past which a turn holding
// ask terms is relevant, matching beyond chance: the share of turns that
// would hold all those terms, were they scattered independently (e^-mass),
// is below share. A search computes it once and compares each turn's mass
// with it (a common word touches tens of thousands of turns). The
// search passes typicalShare over the number of the ask's terms the
// history holds: a match must be rarer than the conversation's average
// word, with a Bonferroni allowance for the ask having several words to
// match by chance. A match on words as common as any, which a random turn
// is as likely to share, is no evidence that the turn is what the ask
// needs, however it ranks against the others.
func relevantMass(share float64) float64 {
	return -math.Log(share)
}

// chanceBound returns the share a statement's match must be rarer than:
// one over the number of (turn, combination of the ask's terms) pairs
// that could match it by chance, n turns times the 2^m - 1 non-empty
// combinations of the m ask terms the history holds. A turn holding a
// combination of share at most e^-mass, by the union bound over those
// pairs, turns up somewhere among the n turns with probability at most
// n(2^m-1)e^-mass; below one, the best match is not what any search of
// that many turns finds by chance. A question is served without it (the
// asker says an old turn is needed, and the best-scored one is worth
// sending); a statement says nothing is needed, so the match alone must
// carry the evidence, and with it the chance packets of a statement do
// not grow with the memory. One word said once is never enough for a
// statement (n turns, one of which holds it, is a share of exactly 1/n).
func chanceBound(n, m int) float64 {
	m = min(max(m, 1), 62) // 2^62 turns is past any memory
	return 1 / (float64(n) * float64(uint64(1)<<m-1))
}

func bm25TF(tf, length, avg float64) float64 {
	return tf * (bm25K1 + 1) / (tf + bm25K1*(1-bm25B+bm25B*length/avg))
}

// windowBest returns the best score a turn of the last exchange in the
// window gets for the ask's stems, with the held turns' statistics.
// Callers hold x.mu.
func (x *Index) windowBest(q Query, qstems []string, limit int, avg float64) float64 {
	if len(qstems) == 0 {
		return 0
	}
	idf := make(map[string]float64, len(qstems))
	for _, term := range qstems {
		idf[term] = bm25IDF(limit, len(x.postings(term, limit)))
	}
	best := 0.0
	tf := map[string]int{}
	for _, t := range lastExchange(q.Window, q.Ask) {
		clear(tf)
		stems, n := x.stems.indexTerms(t.Text)
		for _, st := range stems {
			if _, ok := idf[st]; ok {
				tf[st]++
			}
		}
		// In the ask's order, as lexical sums a held turn's: the two are
		// compared for equality (a map's order made a window turn that
		// says what a held turn says score a rounding above or below it,
		// so the ask was in view on one call and not on the next).
		sc := 0.0
		for _, term := range qstems {
			if f := tf[term]; f > 0 {
				sc += idf[term] * bm25TF(float64(f), float64(n), avg)
			}
		}
		best = max(best, sc)
	}
	return best
}

// lastExchange returns the window's turns since the user's previous
// message, up to the ask: what an ask that continues the conversation
// answers to.
func lastExchange(window []Turn, ask string) []Turn {
	end := len(window)
	if end > 0 && window[end-1].Text == ask {
		end-- // the ask matches itself
	}
	start := end
	for start > 0 {
		start--
		if window[start].Role == roleUser {
			break
		}
	}
	return window[start:end]
}

// roleUser is the engine's user role.
const roleUser = "user"

// contentStems returns the distinct stems of the ask's content words, in
// first-seen order (scores are deterministic), less the parties' names:
// those match the turns the party said (speakerTerms), not the greetings
// that address them. Callers hold x.mu.
func (x *Index) contentStems(ask string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range queryTerms(ask) {
		if x.facts.speakerOf(w) != "" {
			continue
		}
		if s := x.stems.stem(w); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// speakerTerms scores the names of the two parties as terms of every turn
// they said: "What did Caroline research?" matches the turns Caroline said,
// once the conversation shows that the user is called Caroline (see
// facts.speakerOf). Only turns already matched by another term gain: a
// name alone matches half the conversation. Callers hold x.mu.
func (x *Index) speakerTerms(ask string, limit int, avg float64, scores *scoreboard) {
	seen := map[string]bool{}
	for _, w := range queryTerms(ask) {
		role := x.facts.speakerOf(w)
		if role == "" || seen[role] {
			continue
		}
		seen[role] = true
		df := 0
		for i := 0; i < limit; i++ {
			if x.turns[i].Role == role {
				df++
			}
		}
		idf := bm25IDF(limit, df)
		for _, d := range scores.touched {
			if x.turns[d].Role == role {
				scores.acc[d] += idf * bm25TF(1, float64(x.lens[d]+1), avg)
				scores.mass[d] += chanceIDF(limit, df)
			}
		}
	}
}

// present returns how many of stems some turn below limit holds.
// Callers hold x.mu.
func (x *Index) present(stems []string, limit int) int {
	n := 0
	for _, st := range stems {
		if len(x.postings(st, limit)) > 0 {
			n++
		}
	}
	return n
}
