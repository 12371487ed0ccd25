package memory

import (
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
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
	// CostKey names Cost. An index remembers the Cost of each turn it
	// quotes whole under it and reuses it for later queries with the
	// same key (a search costs hundreds of candidates, the same ones
	// turn after turn); so Cost must be a function of the turn alone.
	// Empty: nothing is remembered.
	CostKey string
	// FillTokens bounds the summed Cost of the hits a question (not
	// Statement) gets past the relevance cutoff: the turns that match it
	// beyond chance on their own but score below half the best, the
	// neighbours of those, and every hit's neighbours past the next
	// message (see neighbourReach);
	// then, with what room is left, any other turn sharing a term with it
	// (a weak match, see rank). Zero means none: only the cutoff and
	// the next neighbours size the packet, as for a statement.
	FillTokens int
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
	// Cost is what the hit took of the room: Query.Cost of Turn as quoted
	// (1 without a Cost), so the caller need not count it again.
	Cost int
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
	// neighbourReach: the turns up to two speaker turns away are
	// neighbours, the one k turns away at neighbourShare^max(k,1) of the
	// hit's score. A speaker's turn is the run of messages they send
	// before the other answers: one message in a written conversation, a
	// burst of short ones in a messaging app's chat, where a thought is
	// sent a sentence at a time. So the other messages of the hit's own
	// turn count as its next neighbours do. In a conversation of two
	// parties, the turn two away is the same speaker's next or previous
	// turn: the one who said the hit goes on about it (or led up to it)
	// after the other's reply. Where every turn is one message this is
	// the messages up to two positions away.
	neighbourReach = 2
	// maxWalk bounds the messages walked on each side of a hit for its
	// neighbours: with maxExamined candidates, a search over bursts of
	// any length does a bounded amount of work. Sixteen short messages
	// (a sentence each) are a long paragraph, more than one thought.
	maxWalk = 16
	// maxExamined bounds the candidates one search checks: a packet holds
	// tens of turns, and an ask of common words can match thousands.
	maxExamined = 1024
	// maxPassedOver bounds the candidates a walk passes over for room
	// before it stops: each was worth quoting but longer than the room
	// left, so the packet is as good as full, and a shorter one further
	// down only tops it up with a weaker match. Without it an ask of
	// common words walked all maxExamined candidates on every turn of a
	// long conversation once its packet was full (a 2,000-turn chain: 0.43
	// against 0.28 ms a search, the same hits). Twice maxWalk: as many as
	// a hit's neighbourhood spans on both sides.
	maxPassedOver = 2 * maxWalk
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
	limit := x.limit(q.Before)
	if limit == 0 {
		return nil, searchStats{}
	}
	x.facts.finish()
	m := x.match(q, limit)
	if m.best == 0 {
		return nil, searchStats{}
	}
	return x.pick(q, m, x.rank(m, limit))
}

// match is how the ask matches the turns below the search's limit: the
// lexical scores and what the candidates are measured against.
type match struct {
	scores   *scoreboard
	stems    []string // the ask's content stems
	limit    int      // turns below it are searched
	subjects []string // the names the ask is about
	best     float64  // the best lexical match
	own      float64  // the best match that is not a statement about someone else
	beyond   bool     // some turn matches beyond chance
	inView   bool     // the window answers the ask as well as the memory could
	// surprise is the mass a relevant match passes: relevantMass of the
	// share a turn's match must be rarer than.
	surprise float64
	question bool // the ask asks for recall (not Query.Statement)
	fill     bool // Query.FillTokens allows hits past the cutoff
	// weight holds the BM25 weight of each ask stem (askWeights): what a
	// passage holding it scores, as it ranks (passageScores) and as its
	// turn is quoted (passageOf). Set once the ask matches something.
	weight map[string]float64
}

// match scores the ask against the turns below limit.
func (x *Index) match(q Query, limit int) match {
	f := x.facts
	avg := float64(x.prefix[limit]) / float64(limit)
	if avg <= 0 {
		avg = 1
	}
	qstems := x.contentStems(q.Ask)
	m := match{scores: x.lexical(qstems, limit, avg), stems: qstems, limit: limit}
	x.speakerTerms(q.Ask, limit, avg, m.scores)
	// An ask gets lexical hits only if some turn matches it beyond chance
	// once the ask's number of terms found in the history is allowed for
	// (the more terms, the likelier a chance match of one: Bonferroni);
	// a statement's match must also be beyond chance as the best of the
	// limit turns searched (chanceBound). Without one, like an ask about
	// what is in view, it gets only the statements about the names it
	// mentions.
	present := x.present(qstems, limit)
	ask := x.typicalShare() / float64(max(present, 1))
	if q.Statement {
		ask = min(ask, chanceBound(limit, present))
	}
	m.surprise, m.question, m.fill = relevantMass(ask), !q.Statement, q.FillTokens > 0
	m.subjects = f.askSubjects(q.Ask, q.Asker)
	for _, d := range m.scores.touched {
		m.best = max(m.best, m.scores.get(d))
		m.beyond = m.beyond || m.scores.mass[d] > m.surprise
	}
	if m.best == 0 {
		return m
	}
	// An ask the window answers as well as the memory could is about what
	// is in view: it gets no lexical hits, only the current statements
	// about the names it mentions, which the window may lack.
	m.inView = x.windowBest(q, qstems, limit, avg) >= m.best
	// Then long turns rank by their best passage (the window's check
	// compares whole turns with whole turns).
	m.weight = x.askWeights(qstems, limit)
	x.passageScores(m.scores, qstems, m.weight, limit)
	m.best = 0
	for _, d := range m.scores.touched {
		s := m.scores.get(d)
		m.best = max(m.best, s)
		// The fact check only for a score that would raise own: a common
		// word touches tens of thousands of turns.
		if s > m.own && !f.aboutOthers(x.turns[d].Pos, m.subjects) {
			m.own = s
		}
	}
	return m
}

// cand is a turn in the running for a packet.
type cand struct {
	doc   int32
	score float64
	fact  bool
	fill  bool // only by the beyond-chance rule of a question (or next to such a turn)
	weak  bool // a weak match (see rank) or next to one: ranks after every other
}

// candidates collects cands, one per turn, each at the best score it was
// added with.
type candidates struct {
	ranked []cand
	// at[doc] is 1 + the doc's index in ranked, 0 if it is none: a common
	// word adds tens of thousands, and a map's inserts were most of
	// ranking them. Entries are zeroed by forget.
	at []int32
	// spare is rank's room for the weak matches, kept for the next search.
	spare []cand
}

// reset readies cs for a search over n turns.
func (cs *candidates) reset(n int) {
	if len(cs.at) < n {
		cs.at = make([]int32, n)
	}
}

// forget zeroes at for every ranked candidate.
func (cs *candidates) forget() {
	for _, c := range cs.ranked {
		cs.at[c.doc] = 0
	}
}

func (cs *candidates) add(d int32, sc float64, fact, fill, weak bool) {
	if i := cs.at[d] - 1; i >= 0 {
		c := &cs.ranked[i]
		switch {
		case c.weak && !weak: // a real match after all: its own rank
			c.score, c.weak = sc, false
		case !c.weak && weak: // a real match keeps its own rank
		default:
			c.score = max(c.score, sc)
		}
		c.fact = c.fact || fact
		c.fill = c.fill && fill
		return
	}
	cs.at[d] = int32(len(cs.ranked)) + 1
	cs.ranked = append(cs.ranked, cand{doc: d, score: sc, fact: fact, fill: fill, weak: weak})
}

// rankOrder orders candidates best first: every match before the weak ones,
// then by score, then the later turn.
func rankOrder(a, b cand) int { return byRank.compare(&a, &b) }

// candOrder is an order of candidates: byRank (rankOrder) or byScore (the
// higher score first, ties in no order). The quickselect of a search
// compares thousands of candidates: through a function value, and with
// cmp.Compare's care for NaN, selecting 1,024 of 3,000 took 40.5 µs, with
// this comparison (inlined) 15.3.
type candOrder bool

const (
	byRank  candOrder = false
	byScore candOrder = true
)

func (o candOrder) compare(a, b *cand) int {
	switch {
	case a.weak != b.weak && o == byRank:
		return afterIf(a.weak)
	case a.score != b.score: // never NaN: sums of finite weights
		return afterIf(a.score < b.score)
	case o == byScore:
		return 0
	}
	return int(b.doc) - int(a.doc)
}

// afterIf is 1 (a comes after b) if after holds, else -1.
func afterIf(after bool) int {
	if after {
		return 1
	}
	return -1
}

// rank returns the best candidates, at most maxExamined, in no order (the
// walk reads them in rankOrder: pick): the lexical hits, the statements
// about the ask's subjects and their neighbours.
func (x *Index) rank(m match, limit int) []cand {
	// The candidates' index and list are reused from search to search: a
	// common word adds thousands, and growing them was most of a search's
	// allocation.
	cs := candidatePool.Get().(*candidates)
	cs.reset(limit)
	if n := len(m.scores.touched) + 64; cap(cs.ranked) < n {
		cs.ranked = make([]cand, 0, n) // grown once, not by doubling
	}
	defer func() {
		cs.forget()
		cs.ranked = cs.ranked[:0]
		candidatePool.Put(cs)
	}()
	weak := cs.spare[:0] // apart until the strong are known: a common word adds tens of thousands
	for _, d := range m.scores.touched {
		if m.inView || !m.beyond {
			break
		}
		// A question asks for recall: every turn that matches it beyond
		// chance on its own counts, best first, as far as the room goes.
		// Then, as far as the fill's room still goes, the weak matches:
		// the turns sharing any term with it (the BM25 reference's rule).
		// A match the chance test cannot tell from chance is no evidence
		// on its own, so they rank after every other hit and never count
		// as a statement's update (pick); but the room is the question's,
		// within what reuse allows, and short messages (chat: a sentence,
		// few words) match beyond chance less often than the paragraphs
		// the test was set on, though they are as likely to hold the
		// answer (the texting restyle of LoCoMo dev at 12,288: 70.8%
		// recall without, 74.4% with, and no loss on the written sets;
		// docs/recall-sets.md).
		switch sc := m.scores.get(d); {
		case sc >= cutoff*m.best:
			cs.add(d, sc, false, false, false)
		case m.question && m.fill && m.scores.mass[d] > m.surprise:
			cs.add(d, sc, false, true, false)
		case m.question && m.fill:
			weak = append(weak, cand{doc: d, score: sc, fill: true, weak: true})
		}
	}
	x.addStatements(cs, m, limit)
	// A weak match that is a candidate by a statement keeps that rank.
	weak = slices.DeleteFunc(weak, func(c cand) bool { return cs.at[c.doc] != 0 })
	cs.spare = weak[:0]
	if len(cs.ranked)+len(weak) > maxExamined {
		// Only the best can be reached: keep them before the neighbours,
		// the weak matches only where the others leave places.
		if len(cs.ranked) > maxExamined {
			cs.forget() // before the list is compacted
			cs.ranked = topK(cs.ranked, maxExamined)
			for i, c := range cs.ranked {
				cs.at[c.doc] = int32(i) + 1
			}
		}
		weak = topK(weak, max(maxExamined-len(cs.ranked), 0))
	}
	for _, c := range weak {
		cs.at[c.doc] = int32(len(cs.ranked)) + 1
		cs.ranked = append(cs.ranked, c)
	}
	x.addNeighbours(cs, limit)
	// The best maxExamined, in no order: the walk sorts them as far as it
	// reads (inOrder). Copied into the index's room (cs goes back to the
	// pool), which the walk reads under the same lock.
	x.ranked = append(x.ranked[:0], selectFirst(cs.ranked, maxExamined, byRank)...)
	return x.ranked
}

var candidatePool = sync.Pool{New: func() any { return &candidates{} }}

// addStatements adds the statements below limit about the ask's subjects.
func (x *Index) addStatements(cs *candidates, m match, limit int) {
	for _, subj := range m.subjects {
		if strings.HasPrefix(subj, "@") {
			// The asker speaking of themself ("what did I pick?") is
			// named by no word of the text: the role's name ("user") is
			// a common word of its own in an assistant chat, and ranking
			// every statement the asker made by its best match put them
			// all at the top. They count by their own scores; a name the
			// asker is called by is a term of their turns already
			// (speakerTerms).
			continue
		}
		// A statement about the subject ranks like the best turn that
		// names it: never above the ask's best match, never below the
		// chatter that merely mentions the name.
		nameBest := 0.0
		for _, p := range x.post[x.stems.stem(strings.TrimPrefix(subj, "@"))] {
			if int(p.doc) < limit {
				nameBest = max(nameBest, m.scores.get(p.doc))
			}
		}
		if nameBest < cutoff*m.own {
			// No statement can rank by the name: those that count are
			// already candidates by their own score.
			continue
		}
		for _, pos := range x.facts.bySubject[subj] {
			d, ok := x.byPos[pos]
			if !ok || d >= limit {
				continue
			}
			if sc := max(m.scores.get(int32(d)), nameBest); sc >= cutoff*m.own {
				cs.add(int32(d), sc, true, false, false)
			}
		}
	}
}

// addNeighbours adds the turns around each candidate: the messages of its
// speaker's turn and of the turns on either side at neighbourShare of its
// score, those of the turns two away at neighbourShare² (see
// neighbourReach). Only the message next to it is more than a question's
// fill.
func (x *Index) addNeighbours(cs *candidates, limit int) {
	for i, n := 0, len(cs.ranked); i < n; i++ {
		c := cs.ranked[i]
		for _, dir := range []int32{-1, 1} {
			pos, role := x.turns[c.doc].Pos, x.turns[c.doc].Role
			changes, share := 0, neighbourShare
			for j, d := int32(1), c.doc+dir; j <= maxWalk && d >= 0 && int(d) < limit; j, d = j+1, d+dir {
				t := &x.turns[d]
				// Only true neighbours: the next position, not a gap.
				if abs(t.Pos-pos) != 1 {
					break
				}
				if t.Role != role {
					if changes++; changes > neighbourReach {
						break
					}
					if changes > 1 {
						share *= neighbourShare
					}
				}
				pos, role = t.Pos, t.Role
				if len(t.Text) > longTurn {
					// A long turn (an answer, a paste) is quoted only by
					// its passage where it matches the ask itself: as a
					// neighbour it would spend the room of the short
					// turns around it. The walk goes on past it.
					continue
				}
				// Past the next message, context beyond the hit's own
				// exchange: a question's fill.
				cs.add(d, c.score*share, false, c.fill || j > 1, c.weak)
			}
		}
	}
}

// pick walks the ranked candidates best first and keeps those the window
// does not already carry, within q's bounds.
func (x *Index) pick(q Query, m match, ranked []cand) ([]Hit, searchStats) {
	return x.pickNoted(q, m, ranked, nil)
}

// pickNoted is pick, telling note (if set) why each ranked turn is or is
// not a hit (Explain).
func (x *Index) pickNoted(q Query, m match, ranked []cand, note func(pos int, why Miss)) ([]Hit, searchStats) {
	explaining := note != nil
	if note == nil {
		note = func(int, Miss) {}
	}
	var stats searchStats
	f := x.facts
	inWindow, windowText, later := f.readWindow(q.Window)
	// A weak match (see rank) is no evidence that a statement changed:
	// only the other candidates and the window may update one.
	found := make([]int, 0, len(ranked))
	for _, c := range ranked {
		if !c.weak {
			found = append(found, x.turns[c.doc].Pos)
		}
	}
	among := f.factsAt(found)
	// The turns that may update a statement, read only once a candidate
	// states a fact about one of the ask's subjects.
	var ups *updaterList
	updatersOf := func() *updaterList {
		if ups == nil {
			ups = x.updaters(q, m, ranked)
		}
		return ups
	}

	// Walk best first and check each candidate only when it is reached: an
	// ask made of common words can match thousands of turns, and only the
	// first few that pass matter.
	var out []Hit
	seen := map[uint64]bool{}
	used, filled := 0, 0
	passed := 0 // candidates cut for room; past maxPassedOver the rest are cut
	order := inOrder{xs: ranked}
	for i := range ranked {
		c := order.at(i)
		if q.K > 0 && len(out) >= q.K {
			for _, c := range ranked[i:] { // the ones not walked, in any order
				note(x.turns[c.doc].Pos, MissCut)
			}
			break
		}
		t := x.turns[c.doc]
		text := x.norm[c.doc]
		switch {
		case inWindow[t.Pos]:
			stats.inWindow++
			note(t.Pos, MissInWindow)
			continue
		case windowText[text] || seen[text]:
			stats.duplicate++
			note(t.Pos, MissDuplicate)
			continue
		}
		// A long turn is quoted by its passage that matches the ask best,
		// the one it ranked by, or whole while it is short (quoted).
		p, cost := x.quoted(q, c.doc, x.passageOf(c.doc, m.weight))
		// Past the room for hits past the cutoff, or past the room (a
		// shorter hit further down may still fit). Either way, like a
		// superseded turn, it is passed over and nothing else changes:
		// whether it is superseded, the costly check, is read only for a
		// turn that fits, or to tell why it is not a hit (Explain: a
		// stale turn is stale, not cut).
		cut := passed > maxPassedOver || (c.fill && (q.Statement || filled+cost > q.FillTokens)) ||
			(q.Tokens > 0 && used+cost > q.Tokens && !(len(out) == 0 && cost <= q.FirstTokens))
		if (!cut || explaining) && f.superseded(t.Pos, among, later, updatersOf, m.subjects) {
			stats.superseded++
			note(t.Pos, MissStale)
			continue
		}
		if cut {
			note(t.Pos, MissCut)
			if passed++; passed > maxPassedOver && !explaining {
				break // Explain walks on, telling the rest as cut
			}
			continue
		}
		t = p
		note(t.Pos, MissNone)
		seen[text] = true
		used += cost
		if c.fill {
			filled += cost
		}
		out = append(out, Hit{Turn: t, Score: c.score, Fact: c.fact, Cost: cost})
	}
	if ups != nil {
		ups.release() // the index keeps the room, not this search's turns
	}
	return out, stats
}

// quoted returns how a packet quotes turn d, p being the passage of it
// that matches the ask (passageOf), and what that costs: p, or the whole
// turn where it is at most quoteWhole bytes and takes at most half of the
// room (q.Tokens), see passage.go. Callers hold x.mu.
func (x *Index) quoted(q Query, d int32, p Turn) (Turn, int) {
	cost := func(t Turn) int {
		if q.Cost == nil {
			return 1
		}
		return x.costOf(q, d, t)
	}
	t := x.turns[d]
	if p.Part != "" && len(t.Text) <= quoteWhole {
		if whole := cost(t); q.Tokens == 0 || whole <= q.Tokens/2 {
			return t, whole
		}
	}
	return p, cost(p)
}

// costOf is q.Cost(p), p being turn d or a passage of it, remembered
// under q.CostKey for a whole turn.
func (x *Index) costOf(q Query, d int32, p Turn) int {
	if q.CostKey == "" || p.Part != "" || len(p.Text) != len(x.turns[d].Text) {
		return q.Cost(p)
	}
	if q.CostKey != x.costKey {
		x.costKey, x.costs = q.CostKey, x.costs[:0]
	}
	if n := len(x.turns) - len(x.costs); n > 0 {
		x.costs = append(x.costs, make([]int32, n)...)
	}
	if n := x.costs[d]; n > 0 {
		return int(n - 1)
	}
	n := q.Cost(p)
	x.costs[d] = int32(min(max(n, 0), math.MaxInt32-1)) + 1
	return n
}

// updaters returns the turns that may update a statement a candidate
// makes: the window's and the candidates' that are not weak matches.
func (x *Index) updaters(q Query, m match, ranked []cand) *updaterList {
	// The list and its room are the index's, reused from search to search
	// (under x.mu): a search reads hundreds of updaters.
	l := &x.ups
	maybe := l.turns[:0]
	if len(m.subjects) > 0 { // else nothing is read
		for i := range q.Window {
			maybe = append(maybe, &q.Window[i])
		}
		for _, c := range ranked {
			if !c.weak {
				maybe = append(maybe, &x.turns[c.doc])
			}
		}
	}
	l.reset(maybe, m.subjects, x.facts.heldText)
	return l
}

func abs(n int) int { return max(n, -n) }

// topK returns the k candidates of xs with the highest score, in no
// order, reordering xs (see selectFirst).
func topK(xs []cand, k int) []cand { return selectFirst(xs, k, byScore) }

// selectFirst returns the k first candidates of xs in order o, in no order,
// reordering xs so that they are xs[:k] (quickselect: linear on average,
// where sorting thousands of candidates to keep a thousand would not be).
func selectFirst(xs []cand, k int, o candOrder) []cand {
	if k >= len(xs) {
		return xs
	}
	k = max(k, 0)
	lo, hi := 0, len(xs)-1
	for lo < hi {
		p := xs[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for o.compare(&xs[i], &p) < 0 {
				i++
			}
			for o.compare(&xs[j], &p) > 0 {
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

// inOrder is a list of candidates sorted only as far as it is read: a
// search ranks a thousand candidates and its walk (pick) reads the first
// tens of them, so sorting them all was most of ranking.
type inOrder struct {
	xs     []cand
	sorted int // xs[:sorted] is in rankOrder, and before every other
}

// at returns the i-th candidate in rankOrder, sorting further if it must:
// a block at least as long as the one before (32 first), so reading all n
// sorts about n·log n, as one sort would.
func (o *inOrder) at(i int) cand {
	if i >= o.sorted {
		end := min(len(o.xs), max(2*o.sorted, i+1, 32))
		rest := o.xs[o.sorted:]
		selectFirst(rest, end-o.sorted, byRank)
		slices.SortFunc(rest[:end-o.sorted], rankOrder)
		o.sorted = end
	}
	return o.xs[i]
}

// normalKey is the FNV-1a hash of a text's terms joined by spaces, computed without building
// it: a search compares the normal texts of its window and candidates, a
// thousand or more a search.
func normalKey(s string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	var buf [utf8.UTFMax]byte
	inTerm, any := false, false
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsNumber(r) {
			if !inTerm && any {
				h = (h ^ ' ') * prime
			}
			inTerm, any = true, true
			n := utf8.EncodeRune(buf[:], unicode.ToLower(r))
			for _, c := range buf[:n] {
				h = (h ^ uint64(c)) * prime
			}
			continue
		}
		inTerm = false
	}
	return h
}
