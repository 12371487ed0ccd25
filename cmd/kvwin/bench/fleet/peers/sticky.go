package peers

import (
	"cmp"
	"container/list"
	"slices"
	"sync"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
	"kvwin/router"
)

// llmdSticky is llm-d's "sticky until saturated" routing (PolicyLLMDSticky):
// the llm-d router's optimized-baseline composition since its 1.0 (blog
// "Sticky Until Saturated: Token-Aware Routing in llm-d",
// llm-d.ai/blog/sticky-until-saturated-token-aware-routing; plugins of
// llm-d/llm-d-router under pkg/epp/framework/plugins; the guide's
// guides/optimized-baseline/router/optimized-baseline.values.yaml of
// llm-d/llm-d), each plugin with its published defaults:
//
//   - approx-prefix-cache-producer: a per-pod LRU index of the blocks of
//     the prompts the scheduler sent there (recorded on the pod picked, as
//     it is picked), with autoTune's capacity: the pod's own KV cache in
//     blocks (here its slots × context over the router's 16-token blocks,
//     else lruCapacityPerServer's 31,250); a pod's prefix score is the
//     share of the prompt's blocks it holds from the first to the first
//     miss.
//   - inflight-load-producer: a pod's in-flight tokens are the uncached
//     tokens (the prompt less its matched blocks there) of the requests
//     sent to it and not yet at their first token (addEstimatedOutputTokens
//     false: a streamed request's tokens are released at its first chunk).
//   - prefix-cache-affinity-filter: the pods scoring at least
//     affinityThreshold 0.80 are sticky, and only they are kept, unless
//     none is (all are kept), or the best sticky pod's TTFT exceeds the
//     best non-sticky pod's by more than maxTTFTPenaltyMs 18,000, a pod's
//     TTFT estimated as in-flight tokens / peakPrefillThroughput
//     (ttftSource prefillThroughput). Its default throughput, 15,928
//     tokens/s, is Qwen3-32B's on two H100s, to be recalibrated per
//     deployment by the guide's recipe (the TTFT of a fresh chunk of
//     max_num_batched_tokens tokens): here each pod's own calibrated cost
//     of a fresh chunk of 2,048 tokens, llama-server's default logical
//     batch (router.Candidate.PeakPrefill), the fleet's mean. τ = throughput × 18 s is the blog's saturation threshold in
//     tokens (286,720 on its hardware). explorationProbability 0.
//   - token-load-scorer: 1 − min(1, (in-flight tokens + this request's
//     uncached tokens there) / queueThresholdTokens 4,194,304), with the
//     max-score-picker: the kept pod with the least token load wins, ties
//     at random (here reproducibly, tieOrder).
//
// The pods filtered out follow the kept ones, by the same load, for the
// attempt loop to fall back on. It chooses no slot: it routes to servers,
// and the server places the request.
type llmdSticky struct {
	affinity       float64
	maxPenalty     time.Duration
	queueThreshold int
	lruCapacity    int

	mu     sync.Mutex
	index  map[string]*blockLRU
	active activeSet
}

func newLLMDSticky() *llmdSticky {
	return &llmdSticky{affinity: 0.80, maxPenalty: 18 * time.Second, queueThreshold: 4194304, lruCapacity: 31250,
		index: map[string]*blockLRU{}}
}

// stickyView is one candidate as the composition sees it.
type stickyView struct {
	c        router.Candidate
	score    float64 // prefix score
	uncached int     // this request's tokens the pod does not hold
	inflight int     // the pod's in-flight tokens
}

func (s *llmdSticky) Rank(cands []router.Candidate, p router.Prompt) []router.Candidate {
	if len(cands) == 0 {
		return nil
	}
	s.mu.Lock()
	views := make([]stickyView, len(cands))
	rate := 0.0
	for i, c := range cands {
		v := stickyView{c: c, uncached: p.Length, inflight: s.active.load(c.Name).prefill}
		if len(p.Keys) > 0 {
			n := s.lru(c, p.BlockTokens).prefix(p.Keys)
			v.score = float64(n) / float64(len(p.Keys))
			v.uncached = max(p.Length-n*p.BlockTokens, 0)
		}
		views[i] = v
		rate += c.PeakPrefill / float64(len(cands))
	}
	kept, rest := s.filter(views, rate)
	load := func(v stickyView) float64 {
		return 1 - min(1, float64(v.inflight+v.uncached)/float64(s.queueThreshold))
	}
	order := func(a, b stickyView) int {
		if c := cmp.Compare(load(b), load(a)); c != 0 {
			return c
		}
		return tieOrder(p, a.c, b.c)
	}
	slices.SortStableFunc(kept, order)
	slices.SortStableFunc(rest, order)
	chosen := kept[0]
	if len(p.Keys) > 0 {
		s.lru(chosen.c, p.BlockTokens).add(p.Keys)
	}
	s.mu.Unlock()
	s.active.add(p.ID, chosen.c.Name, 0, chosen.uncached)
	out := make([]router.Candidate, 0, len(cands))
	for _, v := range append(kept, rest...) {
		out = append(out, v.c)
	}
	return out
}

// filter is prefix-cache-affinity-filter: the sticky views and the rest,
// or all and none when none is sticky or stickiness costs more than
// maxPenalty of first-token time at rate tokens per second.
func (s *llmdSticky) filter(views []stickyView, rate float64) (kept, rest []stickyView) {
	for _, v := range views {
		if v.score >= s.affinity {
			kept = append(kept, v)
		} else {
			rest = append(rest, v)
		}
	}
	if len(kept) == 0 {
		return rest, nil
	}
	if len(rest) > 0 && rate > 0 {
		least := func(vs []stickyView) int {
			return slices.MinFunc(vs, func(a, b stickyView) int { return cmp.Compare(a.inflight, b.inflight) }).inflight
		}
		penalty := time.Duration(float64(least(kept)-least(rest)) / rate * float64(time.Second))
		if penalty > s.maxPenalty {
			return views, nil
		}
	}
	return kept, rest
}

// lru is c's index, sized to c's KV cache in blocks of block tokens
// (autoTune); s.mu is held.
func (s *llmdSticky) lru(c router.Candidate, block int) *blockLRU {
	x, ok := s.index[c.Name]
	if !ok {
		capacity := s.lruCapacity
		if c.Cells > 0 {
			capacity = max(c.Cells/max(block, 1), 1)
		}
		x = &blockLRU{capacity: capacity, at: map[kvcache.Key]*list.Element{}}
		s.index[c.Name] = x
	}
	return x
}

func (s *llmdSticky) Watch(p router.Prompt, stream engine.StreamFunc) engine.StreamFunc {
	return s.active.watch(p, stream)
}

func (s *llmdSticky) Ended(p router.Prompt) { s.active.remove(p.ID) }
