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
// see is time and depth: from the turns it routes it learns how long a
// conversation waits before its next turn (the gaps between the turns
// continuing a chain), and, for a chain of k turns, how often one is
// continued at all (q_k); a chain of k turns idle for d is then continued
// with probability
//
//	w(k, d) = q_k·S(d) / (q_k·S(d) + 1 − q_k)
//
// where S(d) is the share of observed gaps longer than d (Bayes: the
// conversation is still going, given that it has not come back in d).
// Depth matters because conversations end by length, not at random: in
// most workloads a chain of one or two turns is nearly always continued,
// and the chains that end are the long ones; idle time alone, with think
// times spread like an exponential's, tells a thinking user from a gone
// one barely better than a coin. q_k is counted from the chains of k
// turns that were continued and those that were not continued within the
// longest gap seen (those still younger are left out, undecided), pulled
// towards the share of all turns continued by priorTurns pseudo-turns, so
// a depth seldom seen weighs as the average. The plan counts what evicting
// the chain destroys times w, and a slot whose chain is very likely
// abandoned (w < abandoned) counts as free. Until minGaps continuations
// are seen, and until the time watched spans matureGaps median gaps (only
// gaps shorter than it can have been seen), w is 1: every chain counts
// whole, as before. Nothing here is fitted to a workload: it is the
// router's own observations of its own turns.

const (
	minGaps   = 32   // continuations seen before liveness weighs anything
	maxGaps   = 1024 // most recent gaps kept
	abandoned = 0.05 // w below which a slot counts as free
	// matureGaps: gaps are trusted once the turns watched span this many
	// median gaps.
	matureGaps = 20
	// maxDepth pools chains of more turns with those of maxDepth.
	maxDepth = 64
	// priorTurns is how many pseudo-turns at the overall continued share
	// each depth's q_k starts from.
	priorTurns = 4
)

// liveness is what the router has seen of its chains being continued.
// Safe for concurrent use.
type liveness struct {
	mu     sync.Mutex
	last   map[kvcache.Location]heldChain // the chain a turn last left there
	tips   map[kvcache.Key]*tip           // the last block of each chain a turn left
	order  []kvcache.Key                  // tips, oldest first, bounding them to maxTips
	aging  []agingTip                     // tips not yet decided, oldest first
	depths [maxDepth + 1]depthCount       // by the chain's turns − 1
	gaps   []time.Duration                // ring of recent continuation gaps
	next   int
	sorted []time.Duration // gaps, sorted; nil when stale
	first  time.Time       // the first turn seen
	turns  int             // turns seen
	cont   int             // of them, continuations of an earlier turn's chain
}

// heldChain is the chain a slot holds: when its last turn ended, its depth
// (turns − 1, capped at maxDepth), and its fork: how many of its first
// blocks a prompt shares when it is a branch of the chain's own
// conversation (placement.go, Branches): the blocks before its last turn
// (up to the tip that turn continued, which holds the conversation's own
// answers), or, for a chain of one turn, that turn's whole prompt (a
// sibling sharing the system prompt shares less), which a branch then
// repeats: asked is its length in units, for the tokens past its last
// full block, which no key covers (a sibling sharing those blocks and
// not the tokens after them is no branch), unless the client named the
// conversation and it is the one that left the chain (owner). fork 0:
// unknown.
type heldChain struct {
	at    time.Time
	depth int
	fork  int
	asked int
	owner uint64 // the conversation of the turn that left it (key.owner); 0 unnamed
}

// tip is a chain's last block as a turn left it: when, its depth, and
// whether it was counted not continued (it outlived the longest gap).
type tip struct {
	heldChain
	ended bool
}

// agingTip is a tip waiting to outlive the longest gap.
type agingTip struct {
	key kvcache.Key
	t   *tip
}

// depthCount is what became of the chains of one depth: continued, or
// not continued within the longest gap seen.
type depthCount struct{ continued, ended int }

// resort: the sorted gaps are refreshed every resort continuations, not
// at each (a plan asks for weights of every slot of the fleet per turn),
// and whenever the gaps have doubled since: the first sort, of a handful
// of gaps, must not stand for the sixty that follow it (it once made one
// early gap of 2.6 s the median, trusted after a minute, and every chain
// idle longer than it counted as abandoned).
const resort = 64

// maxTips bounds the chains whose continuation liveness watches for.
const maxTips = 1 << 16

// observe records a turn that ended at now on loc: prompt is its chain's
// keys, kept what the slot holds after it, shared the blocks of prompt
// the slot held before it. A turn whose prompt continues a chain an
// earlier turn left (on any slot: a conversation evicted from its slot
// and continued elsewhere is seen too, so long gaps are not missed for
// the evictions they cause) is a continuation, after the gap since that
// turn. A turn continuing none that is a branch of the chain the slot
// held (a retry, a regenerate, an edit of the last message) is that
// chain's last turn asked again: no continuation, and its chain keeps
// the depth and fork of the one it replaces. length is the prompt's in
// units; owner names the request's conversation (key.owner; 0 unnamed).
func (l *liveness) observe(loc kvcache.Location, prompt, kept []kvcache.Key, length, shared int, owner uint64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.tips, l.first = map[kvcache.Location]heldChain{}, map[kvcache.Key]*tip{}, now
	}
	l.turns++
	depth, fork, found := 0, len(prompt), false
	for i := len(prompt) - 1; i >= 0; i-- {
		t, ok := l.tips[prompt[i]]
		if !ok {
			continue
		}
		l.cont++
		if len(l.gaps) < maxGaps {
			l.gaps = append(l.gaps, now.Sub(t.at))
		} else {
			l.gaps[l.next] = now.Sub(t.at)
			l.next = (l.next + 1) % maxGaps
		}
		if l.cont%resort == 0 || 2*len(l.sorted) <= len(l.gaps) {
			l.sorted = nil
		}
		d := &l.depths[t.depth]
		d.continued++
		if t.ended { // it outlived the longest gap seen, until now
			d.ended--
		}
		depth, fork, found = min(t.depth+1, maxDepth), i+1, true
		delete(l.tips, prompt[i])
		break
	}
	if was, ok := l.last[loc]; !found && ok && was.forks(shared, length, owner) {
		depth, fork = was.depth, was.fork
	}
	l.age(now)
	h := heldChain{at: now, depth: depth, fork: fork, asked: length, owner: owner}
	if len(kept) > 0 {
		t := &tip{heldChain: h}
		l.tips[kept[len(kept)-1]] = t
		l.aging = append(l.aging, agingTip{key: kept[len(kept)-1], t: t})
		if len(l.aging) > maxTips {
			// Until a continuation is seen nothing ages out (age has no
			// gap to go by): the tips bounded, what waits on them too.
			l.aging = l.aging[len(l.aging)-maxTips:]
		}
		l.order = append(l.order, kept[len(kept)-1])
		for len(l.order) > maxTips {
			delete(l.tips, l.order[0])
			l.order = l.order[1:]
		}
	}
	l.last[loc] = h
}

// continues reports whether prompt continues a chain a turn left (one of
// its keys is a tip), as observe will count it: a returning conversation,
// or a branch of one, not a newcomer.
func (l *liveness) continues(prompt []kvcache.Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(prompt) - 1; i >= 0; i-- {
		if _, ok := l.tips[prompt[i]]; ok {
			return true
		}
	}
	return false
}

// age counts the tips older than the longest gap seen, not continued, as
// ended at their depth. l.mu held.
func (l *liveness) age(now time.Time) {
	if len(l.gaps) == 0 {
		return
	}
	longest := l.sortedGaps()[len(l.sortedGaps())-1]
	i := 0
	for ; i < len(l.aging) && now.Sub(l.aging[i].t.at) > longest; i++ {
		a := l.aging[i]
		if l.tips[a.key] == a.t { // not continued, not forgotten
			a.t.ended = true
			l.depths[a.t.depth].ended++
		}
	}
	l.aging = l.aging[i:]
}

// continued is q_k, the share of chains of depth k continued (see the file
// comment). l.mu held.
func (l *liveness) continued(k int) float64 {
	q := float64(l.cont) / float64(l.turns)
	d := l.depths[k]
	return (float64(d.continued) + priorTurns*q) / float64(d.continued+d.ended+priorTurns)
}

// weights are a chain's chances of being continued: by its depth and idle
// time, and by its idle time alone (q the share of all turns continued).
type weights struct{ byDepth, byIdle float64 }

// whole is the weights of a chain that counts whole.
var whole = weights{1, 1}

// bayes is q·s / (q·s + 1 − q) (see the file comment).
func bayes(q, s float64) float64 {
	if q >= 1 {
		return 1
	}
	return q * s / (q*s + 1 - q)
}

// weight is w(k, d) for the chain at loc, idle since its last turn ended,
// and w(d) with the share of all turns continued for q_k; known is false,
// and both 1, while too little is known.
func (l *liveness) weight(loc kvcache.Location, now time.Time) (w weights, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.last[loc]
	if !ok {
		return whole, false
	}
	return l.weigh(h, now)
}

// tipWeight is weight for the chain a turn left with its last block tip,
// wherever it is held (a backend's saved prompts): 0 once a turn has
// continued it (what remains there is a copy its conversation moved on
// from) or it is forgotten (older than maxTips later chains).
func (l *liveness) tipWeight(tip kvcache.Key, now time.Time) (w weights, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.weighTip(tip, now)
}

// expected is how many of the chains whose last blocks are tips are
// expected to be continued: their weights by depth, summed, those not yet
// known counting nothing (one lock for them all: a node holds hundreds).
func (l *liveness) expected(tips []kvcache.Key, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	sum := 0.0
	for _, t := range tips {
		if w, known := l.weighTip(t, now); known {
			sum += w.byDepth
		}
	}
	return sum
}

// weighTip is tipWeight. l.mu held.
func (l *liveness) weighTip(tip kvcache.Key, now time.Time) (w weights, known bool) {
	t, ok := l.tips[tip]
	if !ok {
		if l.cont < minGaps || l.turns == 0 {
			return whole, false
		}
		return weights{}, true
	}
	return l.weigh(t.heldChain, now)
}

// weigh is weight for a chain held as h. l.mu held.
func (l *liveness) weigh(h heldChain, now time.Time) (w weights, known bool) {
	if l.cont < minGaps || l.turns == 0 {
		return whole, false
	}
	sorted := l.sortedGaps()
	if now.Sub(l.first) < matureGaps*sorted[len(sorted)/2] {
		// Only gaps shorter than the time watched can have been seen:
		// until it is many times the median, long gaps are missing.
		return whole, false
	}
	idle := now.Sub(h.at)
	longer := len(sorted) - sort.Search(len(sorted), func(i int) bool { return sorted[i] > idle })
	s := float64(longer) / float64(len(sorted))
	return weights{byDepth: bayes(l.continued(h.depth), s), byIdle: bayes(float64(l.cont)/float64(l.turns), s)}, true
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

// forks reports whether a prompt of length units sharing shared blocks
// with the chain h is a branch of h's own conversation (see heldChain).
// A prompt of the conversation that left h (owner, named by the client)
// is one whatever its length: a chain of one turn whose whole prompt it
// shares before going on is its own turn with an answer the client
// replaced (measured on real llama-servers: 2,064 tokens recomputed on
// another slot, where about 126 did on its own), not a sibling's.
func (h heldChain) forks(shared, length int, owner uint64) bool {
	return h.fork > 0 && shared >= h.fork && (h.depth > 0 || length == h.asked || owner != 0 && owner == h.owner)
}

// branches reports whether a prompt of length units sharing shared
// blocks with the chain at loc is a branch of that chain's conversation
// (see heldChain); false when no turn of the router's left the chain there.
func (l *liveness) branches(loc kvcache.Location, shared, length int, owner uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.last[loc]
	return ok && h.forks(shared, length, owner)
}

// forget drops what is known of loc: the slot was emptied.
func (l *liveness) forget(loc kvcache.Location) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, loc)
}
