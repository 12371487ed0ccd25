package memory

import (
	"math"
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

// Retrieval rules (see the package doc for why each holds).
var rules = struct {
	facts     string  // "first", "tie" or "off": where current facts about the ask's names rank
	cutoff    float64 // a hit must score at least cutoff × the best hit
	neighbors int     // turns on each side of a hit that come with it
	supersede bool
	windowCut bool
	windowRatio float64
	speakers    bool
	novel       bool
	nscore      float64
}{facts: "name", cutoff: 0.5, neighbors: 1, supersede: true, windowCut: true, windowRatio: 1, speakers: true, nscore: 0.5}

// windowBest returns the best BM25 score of a window turn for q, with the
// held turns' statistics. Callers hold x.mu.
func (x *Index) windowBest(q Query, limit int, avg float64) float64 {
	qs := x.contentStems(q.Ask)
	if len(qs) == 0 {
		return 0
	}
	idf := make(map[string]float64, len(qs))
	for _, term := range qs {
		ps := x.post[term]
		df := sort.Search(len(ps), func(i int) bool { return int(ps[i].doc) >= limit })
		idf[term] = math.Log(1 + (float64(limit-df)+0.5)/(float64(df)+0.5))
	}
	best := 0.0
	tf := map[string]int{}
	for _, t := range q.Window {
		if t.Role == RoleSystem || t.Text == q.Ask {
			continue // the ask matches itself
		}
		clear(tf)
		stems, n := indexTerms(t.Text)
		for _, st := range stems {
			if _, ok := idf[st]; ok {
				tf[st]++
			}
		}
		sc := 0.0
		for term, f := range tf {
			norm := bm25K1 * (1 - bm25B + bm25B*float64(n)/avg)
			sc += idf[term] * float64(f) * (bm25K1 + 1) / (float64(f) + norm)
		}
		best = max(best, sc)
	}
	return best
}

// contentStems returns the ask's stems less the names of the parties.
// Callers hold x.mu.
func (x *Index) contentStems(ask string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range queryTerms(ask) {
		if x.facts.speakerOf(w) != "" {
			continue
		}
		if s := stem(w); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// speakerTerms scores the names of the two parties as terms of every turn
// they said: "What did Caroline research?" matches the turns Caroline said,
// once the conversation shows that the user is called Caroline (see
// facts.speakerOf). Only turns already matched by another term gain. The
// term's frequency is the party's share of turns. Callers hold x.mu.
func (x *Index) speakerTerms(q Query, limit int, avg float64, scores map[int32]float64) {
	seen := map[string]bool{}
	for _, w := range queryTerms(q.Ask) {
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
		idf := math.Log(1 + (float64(limit-df)+0.5)/(float64(df)+0.5))
		for d := range scores {
			if x.turns[d].Role == role {
				norm := bm25K1 * (1 - bm25B + bm25B*float64(x.lens[d]+1)/avg)
				scores[d] += idf * (bm25K1 + 1) / (1 + norm)
			}
		}
	}
}

// RoleSystem is the engine's system role: the system prompt instructs, it
// does not answer.
const RoleSystem = "system"

// search ranks the held turns below q.Before for q. Callers hold x.mu.
func (x *Index) search(q Query) ([]Hit, searchStats) {
	var stats searchStats
	limit := x.limit(q.Before)
	if limit == 0 {
		return nil, stats
	}
	f := x.facts
	f.finish()

	// BM25 over stems, with this history's own statistics.
	avg := float64(x.prefix[limit]) / float64(limit)
	if avg <= 0 {
		avg = 1
	}
	scores := map[int32]float64{}
	qstems := queryStems(q.Ask)
	if rules.novel {
		inWin := map[string]bool{}
		for _, t := range q.Window {
			if t.Role == RoleSystem || t.Text == q.Ask {
				continue
			}
			st, _ := indexTerms(t.Text)
			for _, w := range st {
				inWin[w] = true
			}
		}
		var keep []string
		for _, w := range qstems {
			if !inWin[w] {
				keep = append(keep, w)
			}
		}
		qstems = keep
	}
	if rules.speakers {
		// A party's name matches the turns the party said (speakerTerms),
		// not the greetings that address them.
		qstems = x.contentStems(q.Ask)
	}
	for _, term := range qstems {
		ps := x.post[term]
		k := sort.Search(len(ps), func(i int) bool { return int(ps[i].doc) >= limit })
		ps = ps[:k]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + (float64(limit-len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := bm25K1 * (1 - bm25B + bm25B*float64(x.lens[p.doc])/avg)
			scores[p.doc] += idf * tf * (bm25K1 + 1) / (tf + norm)
		}
	}
	if rules.speakers {
		x.speakerTerms(q, limit, avg, scores)
	}
	best := 0.0
	for _, sc := range scores {
		best = max(best, sc)
	}
	if rules.windowCut {
		// What the window already holds counts as a hit: a packet brings
		// only turns at least cutoff × as relevant as the best the model
		// will see anyway, so an ask the window answers needs nothing.
		bestWin := rules.windowRatio * x.windowBest(q, limit, avg)
		if bestWin > best {
			best = bestWin / rules.cutoff
		}
	}
	type cand struct {
		doc   int32
		score float64
		fact  bool
	}
	var ranked []cand
	for d, sc := range scores {
		if sc >= rules.cutoff*best && sc > 0 {
			ranked = append(ranked, cand{doc: d, score: sc})
		}
	}
	if rules.facts != "off" {
		seen := map[int32]int{}
		for i, c := range ranked {
			seen[c.doc] = i
		}
		for _, subj := range f.askSubjects(q.Ask, q.Asker) {
			// The best turn that names the subject sets the rank of the
			// statements about it: a statement ranks like the best
			// mention of its name, never above the ask's best match.
			nameBest := 0.0
			for _, p := range x.post[stem(strings.TrimPrefix(subj, "@"))] {
				if int(p.doc) < limit {
					nameBest = max(nameBest, scores[p.doc])
				}
			}
			for _, pos := range f.bySubject[subj] {
				d, ok := x.byPos[pos]
				if !ok || d >= limit {
					continue
				}
				sc := scores[int32(d)]
				if rules.facts == "name" {
					sc = max(sc, nameBest)
					if sc < rules.cutoff*best || sc == 0 {
						continue
					}
				}
				if i, ok := seen[int32(d)]; ok {
					ranked[i].fact = true
					ranked[i].score = sc
					continue
				}
				seen[int32(d)] = len(ranked)
				ranked = append(ranked, cand{doc: int32(d), score: sc, fact: true})
			}
		}
		if rules.facts == "tie" {
			for i := range ranked {
				if ranked[i].fact {
					ranked[i].score = max(ranked[i].score, best)
				}
			}
		}
	}
	if rules.nscore > 0 {
		// A hit's neighbours rank as candidates of their own, at a share
		// of its score: the reply to a matching question, the question
		// a matching answer replies to.
		at := map[int32]int{}
		for i, c := range ranked {
			at[c.doc] = i
		}
		n := len(ranked)
		for i := 0; i < n; i++ {
			c := ranked[i]
			for k := 1; k <= rules.neighbors; k++ {
				for _, d := range neighborDocs(c.doc, int32(k)) {
					if d < 0 || int(d) >= limit || x.turns[d].Pos-x.turns[c.doc].Pos != int(d-c.doc) {
						continue
					}
					sc := c.score * rules.nscore
					if j, ok := at[d]; ok {
						ranked[j].score = max(ranked[j].score, sc)
						continue
					}
					at[d] = len(ranked)
					ranked = append(ranked, cand{doc: d, score: sc})
				}
			}
		}
	}
	sort.Slice(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		if rules.facts == "first" && a.fact != b.fact {
			return a.fact
		}
		if a.score != b.score {
			return a.score > b.score
		}
		return a.doc > b.doc
	})

	inWindow := map[int]bool{}
	windowText := map[string]bool{}
	for _, t := range q.Window {
		inWindow[t.Pos] = true
		windowText[normalText(t.Text)] = true
	}
	later := f.windowFacts(q.Window)
	among := make(map[int]bool, len(ranked))
	for _, c := range ranked {
		among[x.turns[c.doc].Pos] = true
	}

	// Walk best first and check each candidate only when it is reached: an
	// ask made of common words can match thousands of turns, and only the
	// first few that pass matter. A hit brings its neighbours along.
	var out []Hit
	taken := map[int32]bool{}
	seen := map[string]bool{}
	used := 0
	full := false
	take := func(d int32, score float64, fact bool) bool {
		if taken[d] {
			return true
		}
		t := x.turns[d]
		text := normalText(t.Text)
		switch {
		case inWindow[t.Pos]:
			stats.inWindow++
			return false
		case windowText[text] || seen[text]:
			stats.duplicate++
			return false
		case rules.supersede && f.superseded(t.Pos, among, later):
			stats.superseded++
			return false
		}
		cost := 1
		if q.Cost != nil {
			cost = q.Cost(t)
		}
		if q.Tokens > 0 && used+cost > q.Tokens {
			return false // a shorter hit further down may still fit
		}
		if q.K > 0 && len(out) >= q.K {
			full = true
			return false
		}
		taken[d] = true
		seen[text] = true
		used += cost
		out = append(out, Hit{Turn: t, Score: score, Fact: fact})
		return true
	}
	for i, c := range ranked {
		if full || i >= maxExamined {
			break
		}
		if !take(c.doc, c.score, c.fact) {
			continue
		}
		for k := 1; k <= rules.neighbors && rules.nscore == 0; k++ {
			for _, d := range neighborDocs(c.doc, int32(k)) {
				if d >= 0 && int(d) < limit && x.turns[d].Pos-x.turns[c.doc].Pos == int(d-c.doc) {
					take(d, 0, false)
				}
			}
		}
	}
	return out, stats
}

var ndir = "both"

func neighborDocs(d, k int32) []int32 {
	switch ndir {
	case "next":
		return []int32{d + k}
	case "prev":
		return []int32{d - k}
	}
	return []int32{d - k, d + k}
}

// maxExamined bounds the candidates one search checks.
const maxExamined = 4096

func normalText(s string) string { return strings.Join(terms(s), " ") }
