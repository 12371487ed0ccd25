package router

import (
	"slices"
	"sort"
	"sync"
	"time"

	"kvwin/kvcache"
)

// Liveness: how likely the chain a slot holds is to be continued.
//
// A slot keeps its KV after its conversation has ended, and the router
// cannot tell an ended conversation from one whose user is thinking. Both
// look alike to the slot plan (placement.go), which weighs what taking a
// slot destroys: so a fleet soon holds nothing "free", and a new
// conversation takes a slot from a live sibling that shares its system
// prompt rather than from one abandoned an hour ago. What the router can
// see is time: from the turns it routes it learns how long a conversation
// waits before its next turn (the gaps between the turns continuing a
// slot's chain) and how often a turn is continued at all; a chain idle
// for d is then continued with probability
//
//	w(d) = q·S(d) / (q·S(d) + 1 − q)
//
// where q is the share of turns that were continued and S(d) the share of
// observed gaps longer than d (Bayes: the conversation is still going,
// given that it has not come back in d). The plan counts what evicting the
// chain destroys times w(d), and a slot whose chain is very likely
// abandoned (w < abandoned) counts as free. Until minGaps continuations
// are seen, and until the time watched spans matureGaps median gaps (only
// gaps shorter than it can have been seen), w is 1: every chain counts
// whole, as before. Nothing here is
// fitted to a workload: it is the router's own observations of its own
// turns.

const (
	minGaps   = 32   // continuations seen before liveness weighs anything
	maxGaps   = 1024 // most recent gaps kept
	abandoned = 0.05 // w below which a slot counts as free
	// matureGaps: gaps are trusted once the turns watched span this many
	// median gaps.
	matureGaps = 20
)

// liveness is what the router has seen of its chains being continued.
// Safe for concurrent use.
type liveness struct {
	mu     sync.Mutex
	last   map[kvcache.Location]time.Time // when a turn last ended there
	tips   map[kvcache.Key]time.Time      // the last block of each chain a turn left, and when
	order  []kvcache.Key                  // tips, oldest first, bounding them to maxTips
	gaps   []time.Duration                // ring of recent continuation gaps
	next   int
	sorted []time.Duration // gaps, sorted; nil when stale
	first  time.Time       // the first turn seen
	turns  int             // turns seen
	cont   int             // of them, continuations of an earlier turn's chain
}

// resort: the sorted gaps are refreshed every resort continuations, not
// at each: a plan asks for weights of every slot of the fleet per turn.
const resort = 64

// maxTips bounds the chains whose continuation liveness watches for.
const maxTips = 1 << 16

// observe records a turn that ended at now on loc: prompt is its chain's
// keys, held what the slot holds after it. A turn whose prompt continues
// a chain an earlier turn left (on any slot: a conversation evicted from
// its slot and continued elsewhere is seen too, so long gaps are not
// missed for the evictions they cause) is a continuation, after the gap
// since that turn.
func (l *liveness) observe(loc kvcache.Location, prompt, held []kvcache.Key, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.tips, l.first = map[kvcache.Location]time.Time{}, map[kvcache.Key]time.Time{}, now
	}
	l.turns++
	for i := len(prompt) - 1; i >= 0; i-- {
		at, ok := l.tips[prompt[i]]
		if !ok {
			continue
		}
		l.cont++
		if len(l.gaps) < maxGaps {
			l.gaps = append(l.gaps, now.Sub(at))
		} else {
			l.gaps[l.next] = now.Sub(at)
			l.next = (l.next + 1) % maxGaps
		}
		if l.cont%resort == 0 {
			l.sorted = nil
		}
		delete(l.tips, prompt[i])
		break
	}
	if len(held) > 0 {
		l.tips[held[len(held)-1]] = now
		l.order = append(l.order, held[len(held)-1])
		for len(l.order) > maxTips {
			delete(l.tips, l.order[0])
			l.order = l.order[1:]
		}
	}
	l.last[loc] = now
}

// weight is w(d) for the chain at loc, idle since its last turn ended;
// known is false, and w 1, while too little is known.
func (l *liveness) weight(loc kvcache.Location, now time.Time) (w float64, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.last[loc]
	if !ok || l.cont < minGaps || l.turns == 0 {
		return 1, false
	}
	sorted := l.sortedGaps()
	if now.Sub(l.first) < matureGaps*sorted[len(sorted)/2] {
		// Only gaps shorter than the time watched can have been seen:
		// until it is many times the median, long gaps are missing.
		return 1, false
	}
	idle := now.Sub(last)
	longer := len(sorted) - sort.Search(len(sorted), func(i int) bool { return sorted[i] > idle })
	s := float64(longer) / float64(len(sorted))
	q := float64(l.cont) / float64(l.turns)
	if q >= 1 {
		return 1, true
	}
	return q * s / (q*s + 1 - q), true
}

// trusted reports whether weight weighs anything yet: enough
// continuations seen, over a long enough time (see the file comment).
func (l *liveness) trusted(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cont < minGaps || l.turns == 0 {
		return false
	}
	sorted := l.sortedGaps()
	return now.Sub(l.first) >= matureGaps*sorted[len(sorted)/2]
}

// sortedGaps is the gaps seen, sorted, refreshed when stale. l.mu held.
func (l *liveness) sortedGaps() []time.Duration {
	if l.sorted == nil {
		l.sorted = slices.Clone(l.gaps)
		slices.Sort(l.sorted)
	}
	return l.sorted
}

// forget drops what is known of loc: the slot was emptied.
func (l *liveness) forget(loc kvcache.Location) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, loc)
}
