package peers

import (
	"container/list"
	"sync"

	"kvwin/engine"
	"kvwin/kvcache"
	"kvwin/router"
)

// llmd is llm-d's default scheduling profile (the inference-scheduling
// "well-lit path" of llm-d/llm-d, scheduler llm-d/llm-d-inference-scheduler
// over the Gateway API Inference Extension's plugins): the approximate
// prefix-cache-scorer (weight 3), the queue-scorer (2) and the
// kv-cache-utilization-scorer (2), summed, and the max-score-picker.
//
//   - prefix-cache-scorer: a per-pod LRU index of the block hashes of the
//     prompts the scheduler sent there (lruCapacityPerServer 31,250 blocks,
//     maxPrefixBlocksToMatch 256, blocks of 64 characters ≈ 16 tokens: the
//     router's own block keys here); a pod scores the share of the prompt's
//     blocks it holds from the first until the first miss.
//   - queue-scorer: the pod's waiting requests (vLLM's num_requests_waiting:
//     here, requests in flight beyond its slots), min-max normalised: fewest
//     1, most 0, all equal 1.
//   - kv-cache-utilization-scorer: 1 − the pod's KV cache use (vLLM's
//     kv_cache_usage_perc: here, the tokens of the turns it has in flight
//     over its KV cells).
//
// Ties are broken at random (reproducibly, by tieOrder).
type llmd struct {
	prefixWeight, queueWeight, kvWeight float64
	maxBlocks, lruCapacity              int

	mu     sync.Mutex
	index  map[string]*blockLRU
	active activeSet
}

func newLLMD() *llmd {
	return &llmd{prefixWeight: 3, queueWeight: 2, kvWeight: 2, maxBlocks: 256, lruCapacity: 31250, index: map[string]*blockLRU{}}
}

func (l *llmd) Rank(cands []router.Candidate, p router.Prompt) []router.Candidate {
	blocks := p.Keys[:min(len(p.Keys), l.maxBlocks)]
	lo, hi := -1, -1
	for _, c := range cands {
		w := max(c.Load-c.Slots, 0)
		if lo < 0 || w < lo {
			lo = w
		}
		hi = max(hi, w)
	}
	score := make(map[string]float64, len(cands))
	l.mu.Lock()
	for _, c := range cands {
		s := 0.0
		if len(blocks) > 0 {
			s = l.prefixWeight * float64(l.lru(c.Name).prefix(blocks)) / float64(len(blocks))
		}
		q := 1.0
		if hi > lo {
			q = float64(hi-max(c.Load-c.Slots, 0)) / float64(hi-lo)
		}
		use := 0.0
		if c.Cells > 0 {
			use = min(float64(l.active.load(c.Name).tokens)/float64(c.Cells), 1)
		}
		score[c.Name] = s + l.queueWeight*q + l.kvWeight*(1-use)
	}
	out := cheapestFirst(cands, p, func(c router.Candidate) float64 { return -score[c.Name] })
	if len(out) > 0 {
		l.lru(out[0].Name).add(blocks)
	}
	l.mu.Unlock()
	if len(out) > 0 {
		l.active.add(p.ID, out[0].Name, p.Length, 0)
	}
	return out
}

// lru is name's index; l.mu is held.
func (l *llmd) lru(name string) *blockLRU {
	x, ok := l.index[name]
	if !ok {
		x = &blockLRU{capacity: l.lruCapacity, at: map[kvcache.Key]*list.Element{}}
		l.index[name] = x
	}
	return x
}

func (l *llmd) Watch(p router.Prompt, stream engine.StreamFunc) engine.StreamFunc {
	return l.active.watch(p, stream)
}

func (l *llmd) Ended(p router.Prompt) { l.active.remove(p.ID) }

// blockLRU is a bounded set of block keys, least recently added evicted
// first.
type blockLRU struct {
	capacity int
	order    list.List // front: most recent
	at       map[kvcache.Key]*list.Element
}

// prefix counts keys held from the first until the first miss.
func (b *blockLRU) prefix(keys []kvcache.Key) int {
	for i, k := range keys {
		if _, ok := b.at[k]; !ok {
			return i
		}
	}
	return len(keys)
}

func (b *blockLRU) add(keys []kvcache.Key) {
	for _, k := range keys {
		if e, ok := b.at[k]; ok {
			b.order.MoveToFront(e)
			continue
		}
		b.at[k] = b.order.PushFront(k)
		for b.order.Len() > b.capacity {
			last := b.order.Back()
			b.order.Remove(last)
			delete(b.at, last.Value.(kvcache.Key))
		}
	}
}
