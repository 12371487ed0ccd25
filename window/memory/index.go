package memory

import (
	"sort"
	"sync"
)

// Index is an in-memory memory over a set of turns: the same retrieval as the
// Store, for conversations that keep no durable state (an unnamed
// conversation's packet comes only from the turns of its own request) and
// for offline evaluation.
//
// Invariants: turns are held sorted by position, one per position (the first
// added wins, as in the Store); post lists indexes into turns in ascending
// order; prefix[i] is the summed length of turns[:i].
type Index struct {
	mu     sync.Mutex
	turns  []Turn
	byPos  map[int]int
	post   map[string][]int
	prefix []int
	facts  *facts
}

// NewIndex returns an index over turns.
func NewIndex(turns ...Turn) *Index {
	x := &Index{byPos: map[int]int{}, post: map[string][]int{}, facts: newFacts()}
	x.Add(turns...)
	return x
}

// Add adds turns; a position already held is ignored. Safe for concurrent
// use.
func (x *Index) Add(turns ...Turn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var fresh []Turn
	inOrder := true
	for _, t := range turns {
		if _, ok := x.byPos[t.Pos]; ok {
			continue
		}
		t = withHandle(t)
		if n := len(x.turns); n > 0 && t.Pos < x.turns[n-1].Pos {
			inOrder = false
		}
		x.byPos[t.Pos] = -1
		x.turns = append(x.turns, t)
		fresh = append(fresh, t)
	}
	if len(fresh) == 0 {
		return
	}
	if !inOrder {
		sort.SliceStable(x.turns, func(i, j int) bool { return x.turns[i].Pos < x.turns[j].Pos })
	}
	x.reindex(inOrder, len(x.turns)-len(fresh))
	x.facts.add(fresh)
}

// reindex rebuilds positions, postings and prefix sums from turn from (or
// from 0 when the order changed).
func (x *Index) reindex(inOrder bool, from int) {
	if !inOrder {
		from = 0
		x.post = map[string][]int{}
		x.prefix = x.prefix[:0]
	}
	if len(x.prefix) == 0 {
		x.prefix = append(x.prefix, 0)
	}
	for i := from; i < len(x.turns); i++ {
		t := x.turns[i]
		x.byPos[t.Pos] = i
		ts := terms(t.Text)
		seen := map[string]bool{}
		for _, term := range ts {
			if !seen[term] {
				seen[term] = true
				x.post[term] = append(x.post[term], i)
			}
		}
		x.prefix = append(x.prefix, x.prefix[len(x.prefix)-1]+len(ts))
	}
}

// highest returns the held turn with the highest position below before
// (any position if before ≤ 0).
func (x *Index) highest(before int) (Turn, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := len(x.turns)
	if before > 0 {
		n = sort.Search(len(x.turns), func(i int) bool { return x.turns[i].Pos >= before })
	}
	if n == 0 {
		return Turn{}, false
	}
	return x.turns[n-1], true
}

// Len returns the number of turns held.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.turns)
}

// Search returns the turns q needs, best first. Safe for concurrent use.
func (x *Index) Search(q Query) []Hit {
	x.mu.Lock()
	defer x.mu.Unlock()
	hits, _ := x.search(q)
	return hits
}

func (x *Index) search(q Query) ([]Hit, searchStats) {
	limit := len(x.turns)
	if q.Before > 0 {
		limit = sort.Search(len(x.turns), func(i int) bool { return x.turns[i].Pos >= q.Before })
	}
	qterms := queryTerms(q.Ask)
	want := map[string]bool{}
	for _, t := range qterms {
		want[t] = true
	}
	docs := map[int]bool{}
	for _, t := range qterms {
		for _, i := range x.post[t] {
			if i >= limit {
				break
			}
			docs[i] = true
		}
	}
	ids := make([]int, 0, len(docs))
	for i := range docs {
		ids = append(ids, i)
	}
	sort.Ints(ids)
	lexical := make([]matched, len(ids))
	for k, i := range ids {
		lexical[k] = newMatched(x.turns[i], want)
	}
	avg := 0.0
	if limit > 0 {
		avg = float64(x.prefix[limit]) / float64(limit)
	}
	return rank(x.facts, q, lexical, limit, avg)
}
