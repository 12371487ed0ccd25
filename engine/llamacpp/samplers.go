package llamacpp

import (
	"sync"

	"github.com/ollama/ollama/llama"
)

// samplers keeps the samplers of finished requests for the next requests
// with the same parameters. Making one (llama.cpp's common_sampler: a
// chain of ten samplers, two random generators' state, its candidate list
// grown to the vocabulary at its first token) took 11–13 µs on the test
// model with the process's garbage collected every 64 requests, and more
// as the C heap grew between collections (a sampler is freed only by its
// finalizer): a tenth of a fully cached turn's time outside llama.cpp,
// every turn. A reset sampler samples as a new one does:
// common_sampler_reset resets every sampler of the chain and reseeds the
// random ones (a fixed seed gives the same draws again, the default seed
// a new random one). Samplers with a grammar are not kept (their grammar is
// a request's own). Safe for concurrent use.
type samplers struct {
	mu    sync.Mutex
	free  map[llama.SamplingParams][]*llama.SamplingContext
	order []llama.SamplingParams // a key per sampler held, oldest first
	max   int
}

// newSamplers keeps at most max samplers: one per slot and as many again
// (a sampler holds a candidate list the size of the vocabulary, 1.5 MB for
// Llama 3's, so the bound is by what runs at once, not by what was seen).
func newSamplers(max int) *samplers {
	return &samplers{free: map[llama.SamplingParams][]*llama.SamplingContext{}, max: max}
}

// get returns a kept sampler for p, reset, or a new one.
func (ss *samplers) get(m *llama.Model, p llama.SamplingParams) (*llama.SamplingContext, error) {
	if p.Grammar == "" {
		ss.mu.Lock()
		var s *llama.SamplingContext
		if held := ss.free[p]; len(held) > 0 {
			s = held[len(held)-1]
			ss.free[p] = held[:len(held)-1]
			if len(held) == 1 {
				delete(ss.free, p)
			}
			if i := ss.oldest(p); i >= 0 {
				ss.order = append(ss.order[:i], ss.order[i+1:]...)
			}
		}
		ss.mu.Unlock()
		if s != nil {
			s.Reset()
			return s, nil
		}
	}
	return llama.NewSamplingContext(m, p)
}

// put keeps s, made for p, once its request is done with it: the oldest
// kept goes (to its finalizer) when max are held.
func (ss *samplers) put(p llama.SamplingParams, s *llama.SamplingContext) {
	if s == nil || p.Grammar != "" || ss.max <= 0 || p != p { // p != p: a NaN, never found again
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.order) >= ss.max {
		old := ss.order[0]
		ss.order = ss.order[1:]
		held := ss.free[old]
		if held = held[1:]; len(held) == 0 {
			delete(ss.free, old)
		} else {
			ss.free[old] = held
		}
	}
	ss.free[p] = append(ss.free[p], s)
	ss.order = append(ss.order, p)
}

// oldest is the index in order of p's oldest entry, -1 if none. Callers
// hold mu.
func (ss *samplers) oldest(p llama.SamplingParams) int {
	for i, q := range ss.order {
		if q == p {
			return i
		}
	}
	return -1
}
