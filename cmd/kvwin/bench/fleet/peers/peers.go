// Package peers is the routing rules of other routers (llm-d, SGLang,
// NVIDIA Dynamo), each from its published description with its published
// defaults, as router.Scorers, for kvwin bench fleet to run side by side
// with kvwin's own; docs/benchmarks.md, bench fleet, says what each is.
package peers

import (
	"cmp"
	"slices"
	"sync"

	"kvwin/engine"
	"kvwin/router"
)

// The peers see what every policy of the router sees (the candidates: the
// router's count of requests in flight per backend, the registry's
// residency) and keep what each peer keeps of its own: llm-d's and
// SGLang's approximate indexes of which prompts they sent where, Dynamo's
// active sequences. Each learns when its peer does: llm-d and SGLang
// record a prompt on the backend they pick as they pick it (llm-d's
// PreRequest, SGLang's insert on selection); Dynamo adds a turn's blocks
// when it routes it, counts its prefill done at its first token and
// removes it when it ends. None chooses a slot: they route to servers,
// and the server places the request.

// Every peer ranks; those that learn from a turn's progress track it.
var (
	_ router.Scorer  = (*sglang)(nil)
	_ router.Tracker = (*dynamo)(nil)
	_ router.Tracker = (*llmd)(nil)
	_ router.Tracker = (*llmdSticky)(nil)
)

// Peer policy names.
const (
	PolicyLLMD       = "llm-d"
	PolicyLLMDSticky = "llm-d-sticky"
	PolicySGLang     = "sglang"
	PolicyDynamo     = "dynamo"
)

// Policies lists the peers' policies.
func Policies() []string {
	return []string{PolicyLLMD, PolicyLLMDSticky, PolicySGLang, PolicyDynamo}
}

// New returns a fresh scorer of the peer policy named policy, nil if
// policy names none. A scorer keeps what its peer learns of the fleet:
// one per router.
func New(policy string) router.Scorer {
	switch policy {
	case PolicyLLMD:
		return newLLMD()
	case PolicyLLMDSticky:
		return newLLMDSticky()
	case PolicySGLang:
		return newSGLang()
	case PolicyDynamo:
		return newDynamo()
	}
	return nil
}

// activeSet is the turns a peer routed and has not seen end, per backend:
// their tokens, and the new tokens of those not yet at their first token.
type activeSet struct {
	mu        sync.Mutex
	turns     map[uint64]activeTurn
	byBackend map[string]activeLoad
}

type activeTurn struct {
	backend         string
	tokens, prefill int
}

// activeLoad is what a backend's active turns add up to.
type activeLoad struct{ tokens, prefill int }

func (a *activeSet) add(id uint64, backend string, tokens, prefill int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turns == nil {
		a.turns, a.byBackend = map[uint64]activeTurn{}, map[string]activeLoad{}
	}
	a.turns[id] = activeTurn{backend: backend, tokens: tokens, prefill: prefill}
	l := a.byBackend[backend]
	l.tokens += tokens
	l.prefill += prefill
	a.byBackend[backend] = l
}

// prefilled counts turn id's prefill done.
func (a *activeSet) prefilled(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.turns[id]
	if !ok || t.prefill == 0 {
		return
	}
	l := a.byBackend[t.backend]
	l.prefill -= t.prefill
	a.byBackend[t.backend] = l
	t.prefill = 0
	a.turns[id] = t
}

func (a *activeSet) remove(id uint64) {
	a.prefilled(id)
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.turns[id]
	if !ok {
		return
	}
	delete(a.turns, id)
	l := a.byBackend[t.backend]
	l.tokens -= t.tokens
	a.byBackend[t.backend] = l
}

func (a *activeSet) load(backend string) activeLoad {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byBackend[backend]
}

// watch marks the turn's prefill done at its first event.
func (a *activeSet) watch(p router.Prompt, stream engine.StreamFunc) engine.StreamFunc {
	return func(ev engine.Event) error {
		if ev.First {
			a.prefilled(p.ID)
		}
		if stream == nil {
			return nil
		}
		return stream(ev)
	}
}

// tieOrder breaks a peer's ties the way its random pick would, but
// reproducibly: by a hash of the turn and the backend.
func tieOrder(p router.Prompt, a, b router.Candidate) int {
	return cmp.Compare(router.Rendezvous(p.ID, b.Name), router.Rendezvous(p.ID, a.Name))
}

// cheapestFirst is cands by cost, lowest first, ties in tieOrder; cands is
// not changed.
func cheapestFirst(cands []router.Candidate, p router.Prompt, cost func(router.Candidate) float64) []router.Candidate {
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b router.Candidate) int {
		if c := cmp.Compare(cost(a), cost(b)); c != 0 {
			return c
		}
		return tieOrder(p, a, b)
	})
	return out
}
