package memory

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Index is an in-memory memory over one history's turns: an inverted index
// of stemmed terms with their frequencies, and the fact analysis. The Store
// keeps one per branch; an unnamed conversation's packet comes from one
// built over its own request's turns; offline evaluation uses it directly.
//
// Invariants: turns are held sorted by position, one per position (the
// first added wins); post[term] lists (turn index, frequency) in ascending
// turn index; lens[i] is the term count of turns[i] and prefix[i] the
// summed lens of turns[:i].
type Index struct {
	mu     sync.Mutex
	turns  []Turn
	lens   []int32
	byPos  map[int]int
	post   map[string][]posting
	prefix []int
	facts  *facts
	stems  stemmer
	board  scoreboard             // search's scratch space
	ups    updaterList            // search's updaters (updaters), reused
	ranked []cand                 // rank's result, read by the walk under the same lock: at most a candidate a turn
	long   map[int32]passageTerms // passages of long turns by turn index (passage.go)
	// ppost[stem] lists the passages of long turns that hold stem, in
	// ascending passage id, and pdoc each passage's turn, by passage id;
	// a stem every passage of a turn holds is listed once for the turn,
	// in pall[stem] (ascending turn index), not once per passage: it adds
	// the same to each, and a long answer's topic is often in every
	// paragraph of it (see Index.passageScores).
	ppost, pall map[string][]int32
	pdoc        []int32
	norm        []uint64 // norm[i] = normalKey(turns[i].Text): a search compares hundreds
	// occ[term] is how often the held turns say term; said is Σ occ and
	// weighted Σ occ·df over the terms (see typicalShare).
	occ            map[string]int
	said, weighted float64

	// costs[d] is 1 + the Cost of turn d under Query.CostKey costKey, 0
	// when not yet asked (costOf); reset when the turns are reordered.
	costKey string
	costs   []int32

	held atomic.Int64 // Bytes: the estimate of what the turns added hold
}

// What an index holds per turn, measured (heap after a GC, indexes of
// 2,000 and 8,000 turns of English words): about 1.1 KB a turn of 40
// bytes, 8.5 KB of 200 bytes, 44 KB of 1,000 bytes: the postings, the
// statistics and above all the fact analysis grow with the text. The
// estimate is an upper line over those points.
const (
	indexBytesPerTurn = 300
	indexBytesPerByte = 44
)

// Bytes estimates the memory the index holds (see indexBytesPerByte). It
// only grows with Add; safe for concurrent use, and it takes no lock.
func (x *Index) Bytes() int64 { return x.held.Load() }

// posting is one turn holding a term.
type posting struct {
	doc int32 // index into turns
	tf  int32
}

// NewIndex returns an index over turns.
func NewIndex(turns ...Turn) *Index {
	x := &Index{byPos: map[int]int{}, post: map[string][]posting{}, occ: map[string]int{}, facts: newFacts(), stems: stemmer{}}
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
	var n int64
	for _, t := range fresh {
		n += indexBytesPerTurn + indexBytesPerByte*int64(len(t.Text)+len(t.Role)+len(t.Handle))
	}
	x.held.Add(n)
	if !inOrder {
		sort.SliceStable(x.turns, func(i, j int) bool { return x.turns[i].Pos < x.turns[j].Pos })
		x.costs = x.costs[:0]
	}
	x.reindex(inOrder, len(x.turns)-len(fresh))
	x.facts.add(fresh)
}

// reindex rebuilds positions, postings and lengths from turn from (or from
// 0 when the order changed).
func (x *Index) reindex(inOrder bool, from int) {
	if x.long == nil || !inOrder {
		// Keyed by turn index, which a reorder changes.
		x.long, x.ppost, x.pall, x.pdoc = map[int32]passageTerms{}, map[string][]int32{}, map[string][]int32{}, x.pdoc[:0]
	}
	if !inOrder {
		from = 0
		x.post = map[string][]posting{}
		x.prefix = x.prefix[:0]
		x.lens = x.lens[:0]
		x.occ, x.said, x.weighted = map[string]int{}, 0, 0
	}
	if len(x.prefix) == 0 {
		x.prefix = append(x.prefix, 0)
	}
	tf, in := map[string]int32{}, map[string]int{}
	for i := from; i < len(x.turns); i++ {
		t := x.turns[i]
		x.byPos[t.Pos] = i
		x.norm = append(x.norm[:i], normalKey(t.Text))
		clear(tf)
		stems, n := x.stems.indexTerms(t.Text)
		for _, term := range stems {
			tf[term]++
		}
		for term, f := range tf {
			// (occ+f)(df+1) - occ·df: the term's weight with one more turn.
			occ, df := x.occ[term], len(x.post[term])
			x.weighted += float64(occ + int(f)*(df+1))
			x.said += float64(f)
			x.occ[term] = occ + int(f)
			x.post[term] = append(x.post[term], posting{doc: int32(i), tf: f})
		}
		if len(t.Text) > longTurn {
			pt := x.readPassages(t.Text)
			pt.first = int32(len(x.pdoc))
			x.long[int32(i)] = pt
			x.postPassages(int32(i), pt, in)
		}
		x.lens = append(x.lens, int32(n))
		x.prefix = append(x.prefix, x.prefix[len(x.prefix)-1]+n)
	}
}

// highest returns the held turn with the highest position below before
// (any position if before ≤ 0).
func (x *Index) highest(before int) (Turn, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.limit(before)
	if n == 0 {
		return Turn{}, false
	}
	return x.turns[n-1], true
}

// at returns the held turn at pos.
func (x *Index) at(pos int) (Turn, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	i, ok := x.byPos[pos]
	if !ok || i < 0 {
		return Turn{}, false
	}
	return x.turns[i], true
}

// limit returns the number of turns below before (all if before ≤ 0).
// Callers hold x.mu.
func (x *Index) limit(before int) int {
	if before <= 0 {
		return len(x.turns)
	}
	return sort.Search(len(x.turns), func(i int) bool { return x.turns[i].Pos >= before })
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

// postPassages adds the passage postings of long turn i (see ppost and
// pall); in is scratch room.
func (x *Index) postPassages(i int32, pt passageTerms, in map[string]int) {
	clear(in)
	for _, stems := range pt.stems {
		for _, st := range stems {
			in[st]++
		}
	}
	for _, st := range pt.all {
		if in[st] == len(pt.stems) {
			x.pall[st] = append(x.pall[st], i)
		}
	}
	for _, stems := range pt.stems {
		id := int32(len(x.pdoc))
		x.pdoc = append(x.pdoc, i)
		for _, st := range stems {
			if in[st] < len(pt.stems) {
				x.ppost[st] = append(x.ppost[st], id)
			}
		}
	}
}
