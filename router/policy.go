package router

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Policies the router knows.
const (
	PolicyPrefix      = "prefix"
	PolicyRoundRobin  = "round-robin"
	PolicyLeastLoaded = "least-loaded"
	PolicyRandom      = "random"
)

// Policies lists the routing policies.
func Policies() []string {
	return []string{PolicyPrefix, PolicyRoundRobin, PolicyLeastLoaded, PolicyRandom}
}

// prompt is what a scorer knows of the turn: the conversation's root key
// (for rendezvous hashing), its length in tokens, its block keys (exact
// when a backend rendered its tokens, else approximate, over text) with
// their block size in tokens, and the turn's sequence number in this
// router.
type prompt struct {
	root   uint64
	length int
	keys   []kvcache.Key
	block  int // tokens per key
	id     uint64
}

// scorer is a routing policy: it ranks a turn's candidates, best first
// (the attempt loop walks the order), and says for each which slot it
// would run the turn on (candidate.prefer; -1 lets the backend, or the
// tenant pin, choose). It reads no clock: what it ranks by is in the
// candidates (estimate.go), so a simulated fleet can score alike. Safe for
// concurrent use.
type scorer interface {
	rank(cands []candidate, p prompt) []candidate
}

var (
	_ scorer = prefixScorer{}
	_ scorer = (*roundRobin)(nil)
	_ scorer = leastLoaded{}
	_ scorer = randomOrder{}
)

func newScorer(policy string, cfg Config) (scorer, error) {
	if cfg.Scorer != nil {
		return external{cfg.Scorer}, nil
	}
	switch policy {
	case PolicyPrefix:
		return prefixScorer{cfg: cfg}, nil
	case PolicyRoundRobin:
		return &roundRobin{}, nil
	case PolicyLeastLoaded:
		return leastLoaded{}, nil
	case PolicyRandom:
		return randomOrder{}, nil
	}
	return nil, fmt.Errorf("router: unknown policy %q (want one of %v, or a Config.Scorer)", policy, Policies())
}

// prompt is the turn as a scorer sees it; id numbers it.
func (k key) prompt(id uint64) prompt {
	keys, block := k.exact.Keys, k.exact.BlockSize
	if len(keys) == 0 {
		keys, block = k.approx.Keys, max(engine.EstimateTokens(k.approx.BlockSize), 1)
	}
	return prompt{root: k.root(), length: k.length, keys: keys, block: max(block, 1), id: id}
}

// prefixScorer ranks by predicted time to first token, with the hot-spot
// guard and rendezvous tie-breaking described in docs/routing.md, and
// runs the turn on the slot holding its prefix (see prefer).
type prefixScorer struct{ cfg Config }

func (p prefixScorer) rank(cands []candidate, pr prompt) []candidate {
	out := slices.Clone(cands)
	for i := range out {
		out[i].prefer = prefer(out[i], pr.length)
	}
	root := pr.root
	best := slices.MinFunc(out, func(a, b candidate) int { return cmp.Compare(a.predicted, b.predicted) })
	// The tolerance is of the time to first token. What a placement
	// destroys (extra) and what it computes (prefill) are costs no noise
	// explains, so a candidate destroying more than the best does, or
	// computing more than the least any candidate within the tolerance
	// computes, is no tie: a queue ahead of a turn clears, the prefill
	// done instead is work the fleet does. Ranked alike, a conversation
	// whose backend was busy with a sibling's turn left its slot to
	// recompute all it held (equal TTFT under the uncalibrated prior).
	tie := best.predicted + max(time.Duration(float64(best.predicted-best.extra)*p.cfg.TieTolerance), best.slack)
	within := func(c candidate) bool { return c.predicted <= tie && c.extra <= best.extra+best.slack }
	least := best
	for _, c := range out {
		if within(c) && c.prefill < least.prefill {
			least = c
		}
	}
	isTie := func(c candidate) bool { return within(c) && c.prefill <= least.prefill+least.slack }
	slices.SortStableFunc(out, func(a, b candidate) int {
		aTie, bTie := isTie(a), isTie(b)
		switch {
		case aTie && bTie:
			return cmp.Compare(Rendezvous(root, b.name), Rendezvous(root, a.name))
		case aTie != bTie:
			if aTie {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.predicted, b.predicted)
	})
	if guard(out, p.cfg) {
		least := slices.MinFunc(out, func(a, b candidate) int { return cmp.Compare(a.load, b.load) })
		i := slices.IndexFunc(out, func(c candidate) bool { return c.index == least.index })
		out = append([]candidate{least}, slices.Delete(out, i, i+1)...)
	}
	return out
}

// guard reports whether load is uneven enough that the least loaded
// candidate must win: by more than BalanceAbs requests and BalanceRel times.
func guard(cands []candidate, cfg Config) bool {
	lo, hi := cands[0].load, cands[0].load
	for _, c := range cands {
		lo, hi = min(lo, c.load), max(hi, c.load)
	}
	return hi-lo > cfg.BalanceAbs && float64(hi) > cfg.BalanceRel*float64(max(lo, 1))
}

// prefer is the slot the prefix policy runs a turn of length tokens on
// at c: the planned slot of a backend whose slots reuse only their own KV
// (placement.go); on a backend the router isolates tenants on, the slot
// holding the prefix, for the tenant pin to weigh (tenancy.go); else the
// slot holding the prefix only for a continuation (the slot holds most of
// the prompt): a prefix shared with other conversations (a system prompt)
// can be reused from any slot, and pinning every member of a group to the
// one slot that holds it would queue them behind each other while other
// slots sit idle.
func prefer(c candidate, length int) int {
	switch {
	case c.hasPlan:
		return c.plan
	case c.isolated, 2*c.cached >= length:
		return c.holdingSlot
	}
	return -1
}

// roundRobin takes the candidates in turn.
type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) rank(cands []candidate, _ prompt) []candidate {
	start := int(r.next.Add(1)-1) % len(cands)
	return append(slices.Clone(cands[start:]), cands[:start]...)
}

// leastLoaded ranks by requests in flight per slot.
type leastLoaded struct{}

func (leastLoaded) rank(cands []candidate, _ prompt) []candidate {
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b candidate) int {
		return cmp.Compare(float64(a.load)/float64(max(a.slots, 1)), float64(b.load)/float64(max(b.slots, 1)))
	})
	return out
}

// randomOrder ranks at random.
type randomOrder struct{}

func (randomOrder) rank(cands []candidate, _ prompt) []candidate {
	out := slices.Clone(cands)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
