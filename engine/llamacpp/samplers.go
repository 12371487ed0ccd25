package llamacpp

import (
	"slices"
	"sync"

	"github.com/ollama/ollama/llama"
)

// samplers keeps the samplers of finished requests for the next requests
// with the same parameters. Making one (llama.cpp's common_sampler: a
// chain of about ten samplers, two random generators' state, its candidate
// list grown to the vocabulary at its first token) took 11–13 µs on the
// test model with the process's garbage collected every 64 requests, and
// more as the C heap grew between collections (a sampler is freed only by
// its finalizer); keeping them took bench overhead's queue phase from
// 0.09–0.11 to 0.04–0.05 ms at 2 messages. A reset sampler samples as a
// new one does: common_sampler_reset resets every sampler of the chain and
// reseeds the random ones (a fixed seed gives the same draws again, the
// default seed a new random one). Samplers with a grammar are not kept
// (their grammar is a request's own). Safe for concurrent use.
type samplers struct {
	mu   sync.Mutex
	held []keptSampler // oldest first
	max  int
}

type keptSampler struct {
	p llama.SamplingParams
	s *llama.SamplingContext
}

// newSamplers keeps at most max samplers: one per slot and as many again
// (a sampler holds a candidate list the size of the vocabulary, 1.5 MB for
// Llama 3's, so the bound is by what runs at once, not by what was seen).
func newSamplers(max int) *samplers { return &samplers{max: max} }

// get returns a kept sampler for p, reset, or a new one.
func (ss *samplers) get(m *llama.Model, p llama.SamplingParams) (*llama.SamplingContext, error) {
	ss.mu.Lock()
	var s *llama.SamplingContext
	if i := slices.IndexFunc(ss.held, func(k keptSampler) bool { return k.p == p }); i >= 0 && p.Grammar == "" {
		s = ss.held[i].s
		ss.held = slices.Delete(ss.held, i, i+1)
	}
	ss.mu.Unlock()
	if s == nil {
		return llama.NewSamplingContext(m, p)
	}
	s.Reset()
	return s, nil
}

// put keeps s, made for p, once its request is done with it: the oldest
// kept goes (to its finalizer) when max are held. A NaN parameter (p != p)
// would never be found again.
func (ss *samplers) put(p llama.SamplingParams, s *llama.SamplingContext) {
	if s == nil || p.Grammar != "" || ss.max <= 0 || p != p {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.held) >= ss.max {
		ss.held = slices.Delete(ss.held, 0, 1)
	}
	ss.held = append(ss.held, keptSampler{p: p, s: s})
}
