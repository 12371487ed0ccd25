package router

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"kvwin/engine"
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

// candidate is one backend as one request sees it.
type candidate struct {
	index      int
	name       string
	load       int           // requests in flight
	slots      int           // parallel slots
	cached     int           // prompt tokens it holds (registry)
	own, ownOf int           // units (tokens, or bytes of text) of the prompt's chain of ownOf units the registry says it holds for the request's tenant
	slot       int           // slot holding them; -1 unknown
	planned    bool          // slot is the router's plan for a backend whose slots reuse only their own KV (placement.go)
	predicted  time.Duration // predicted time to first token
	slack      time.Duration // predicted time of TieTokens tokens: differences below it are ties
}

// capCached caps a backend's reported reuse at the tenant's own prefix
// there: in tokens for exact chains; for approximate ones (bytes of text)
// the same share of the prompt the backend counted, since the gateway's
// token estimate of a text is not the backend's.
func (c candidate) capCached(t engine.Timings) int {
	limit := c.own
	if c.ownOf > 0 && c.own < c.ownOf {
		limit = int(int64(c.own) * int64(t.PromptTokens) / int64(c.ownOf))
	}
	if c.ownOf > 0 && c.own >= c.ownOf {
		limit = t.PromptTokens
	}
	return max(0, min(t.CachedTokens, limit))
}

// orderer ranks candidates, best first. Failover walks the order.
type orderer interface {
	order(cands []candidate, root uint64) []candidate
}

func newOrderer(policy string, cfg Config) (orderer, error) {
	switch policy {
	case PolicyPrefix:
		return prefixOrder{cfg: cfg}, nil
	case PolicyRoundRobin:
		return &roundRobin{}, nil
	case PolicyLeastLoaded:
		return leastLoaded{}, nil
	case PolicyRandom:
		return randomOrder{}, nil
	}
	return nil, fmt.Errorf("router: unknown policy %q (want one of %v)", policy, Policies())
}

// rendezvous is the highest-random-weight score of a backend for a key.
func rendezvous(root uint64, name string) uint64 {
	h := xxhash.New()
	var b [8]byte
	for i := range b {
		b[i] = byte(root >> (8 * i))
	}
	h.Write(b[:])
	h.WriteString(name)
	return h.Sum64()
}

// prefixOrder ranks by predicted time to first token, with the hot-spot
// guard and rendezvous tie-breaking described in the package doc.
type prefixOrder struct{ cfg Config }

func (p prefixOrder) order(cands []candidate, root uint64) []candidate {
	out := slices.Clone(cands)
	best := slices.MinFunc(out, func(a, b candidate) int { return cmp.Compare(a.predicted, b.predicted) })
	tie := best.predicted + max(time.Duration(float64(best.predicted)*p.cfg.TieTolerance), best.slack)
	slices.SortStableFunc(out, func(a, b candidate) int {
		aTie, bTie := a.predicted <= tie, b.predicted <= tie
		switch {
		case aTie && bTie:
			return cmp.Compare(rendezvous(root, b.name), rendezvous(root, a.name))
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

type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) order(cands []candidate, _ uint64) []candidate {
	start := int(r.next.Add(1)-1) % len(cands)
	return append(slices.Clone(cands[start:]), cands[:start]...)
}

type leastLoaded struct{}

func (leastLoaded) order(cands []candidate, _ uint64) []candidate {
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b candidate) int {
		return cmp.Compare(float64(a.load)/float64(max(a.slots, 1)), float64(b.load)/float64(max(b.slots, 1)))
	})
	return out
}

type randomOrder struct{}

func (randomOrder) order(cands []candidate, _ uint64) []candidate {
	out := slices.Clone(cands)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
