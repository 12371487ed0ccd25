package router

import (
	"cmp"
	"container/list"
	"slices"
	"sort"
	"sync"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Peer policies: the routing rules of llm-d, SGLang's router and NVIDIA
// Dynamo's KV router, each implemented from its published description with
// its published default parameters, as scorers of this router, for side by
// side comparison (kvwin bench fleet). They see what every scorer sees (the
// candidates: the router's count of requests in flight per backend, the
// registry's residency) and keep what each peer keeps of its own: llm-d's
// and SGLang's approximate indexes of which prompts they sent where,
// Dynamo's active sequences. Each learns when its peer does: llm-d and
// SGLang record a prompt on the backend they pick as they pick it (llm-d's
// PreRequest, SGLang's insert on selection); Dynamo adds a turn's blocks
// when it routes it, counts its prefill done at its first token and removes
// it when it ends. None chooses a slot: they route to servers, and the
// server places the request (prefer −1).

// Peer policy names.
const (
	PolicyLLMD   = "llm-d"
	PolicySGLang = "sglang"
	PolicyDynamo = "dynamo"
)

// PeerPolicies lists the peers' policies the router also runs, for
// comparison.
func PeerPolicies() []string {
	return []string{PolicyLLMD, PolicyLLMDSticky, PolicySGLang, PolicyDynamo}
}

func newPeerScorer(policy string, _ Config) scorer {
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

var (
	_ scorer  = (*llmd)(nil)
	_ scorer  = (*sglang)(nil)
	_ scorer  = (*dynamo)(nil)
	_ tracker = (*llmd)(nil)
	_ tracker = (*dynamo)(nil)
)

// tracker is a scorer that follows the turns it ranked: watch wraps the
// turn's stream (its first event is the first token), ended is called once
// the turn is over, answered or not.
type tracker interface {
	watch(p prompt, stream engine.StreamFunc) engine.StreamFunc
	ended(p prompt)
}

// prompt is the turn as a scorer sees it; id numbers it.
func (k key) prompt(id uint64) prompt {
	keys, block := k.exact.Keys, k.exact.BlockSize
	if len(keys) == 0 {
		keys, block = k.approx.Keys, max(engine.EstimateTokens(k.approx.BlockSize), 1)
	}
	return prompt{root: k.root(), length: k.length, keys: keys, block: max(block, 1), id: id}
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
func (a *activeSet) watch(p prompt, stream engine.StreamFunc) engine.StreamFunc {
	return func(ev engine.Event) error {
		if ev.First {
			a.prefilled(p.id)
		}
		if stream == nil {
			return nil
		}
		return stream(ev)
	}
}

// tieOrder breaks a peer's ties the way its random pick would, but
// reproducibly: by a hash of the turn and the backend.
func tieOrder(p prompt, a, b candidate) int {
	return cmp.Compare(rendezvous(p.id, b.name), rendezvous(p.id, a.name))
}

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

func (l *llmd) rank(cands []candidate, p prompt) []candidate {
	blocks := p.keys[:min(len(p.keys), l.maxBlocks)]
	lo, hi := -1, -1
	for _, c := range cands {
		w := max(c.load-c.slots, 0)
		if lo < 0 || w < lo {
			lo = w
		}
		hi = max(hi, w)
	}
	score := make(map[int]float64, len(cands))
	l.mu.Lock()
	for _, c := range cands {
		s := 0.0
		if len(blocks) > 0 {
			s = l.prefixWeight * float64(l.lru(c.name).prefix(blocks)) / float64(len(blocks))
		}
		q := 1.0
		if hi > lo {
			q = float64(hi-max(c.load-c.slots, 0)) / float64(hi-lo)
		}
		use := 0.0
		if c.cells > 0 {
			use = min(float64(l.active.load(c.name).tokens)/float64(c.cells), 1)
		}
		score[c.index] = s + l.queueWeight*q + l.kvWeight*(1-use)
	}
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b candidate) int {
		if c := cmp.Compare(score[b.index], score[a.index]); c != 0 {
			return c
		}
		return tieOrder(p, a, b)
	})
	if len(out) > 0 {
		l.lru(out[0].name).add(blocks)
	}
	l.mu.Unlock()
	if len(out) > 0 {
		l.active.add(p.id, out[0].name, p.length, 0)
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

func (l *llmd) watch(p prompt, stream engine.StreamFunc) engine.StreamFunc {
	return l.active.watch(p, stream)
}

func (l *llmd) ended(p prompt) { l.active.remove(p.id) }

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

// sglang is SGLang's cache-aware router (sgl-project/sglang, sgl-router:
// policies/cache_aware.rs and its README), with its documented defaults
// cache_threshold 0.5, balance_abs_threshold 32, balance_rel_threshold
// 1.0001 and max_tree_size 2^24 characters (here 2^22 tokens, at four
// characters a token). Per worker it keeps an approximate radix tree of the
// prompts it sent there (here over the router's 16-token block keys, not
// characters). When the load is imbalanced (the most loaded worker has
// more than balance_abs requests more than the least, and more than
// balance_rel times as many) the least loaded worker wins; otherwise the
// worker whose tree matches the largest share of the prompt wins if that
// share exceeds cache_threshold, else the worker with the smallest tree.
// The prompt is inserted into the winner's tree. Trees over their size are
// pruned least recently used first (SGLang prunes every 60 s; here at
// once, which changes nothing until a tree holds 2^22 tokens).
type sglang struct {
	cacheThreshold, balanceRel float64
	balanceAbs, maxTreeTokens  int

	mu    sync.Mutex
	trees map[string]*approxTree
	clock uint64
}

func newSGLang() *sglang {
	return &sglang{cacheThreshold: 0.5, balanceAbs: 32, balanceRel: 1.0001, maxTreeTokens: 1 << 22, trees: map[string]*approxTree{}}
}

// approxTree is one worker's tree: each block key (a key names its whole
// prefix, so the set is a trie) with when it was last inserted.
type approxTree struct{ used map[kvcache.Key]uint64 }

func (s *sglang) rank(cands []candidate, p prompt) []candidate {
	if len(cands) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := cands[0].load, cands[0].load
	for _, c := range cands {
		lo, hi = min(lo, c.load), max(hi, c.load)
	}
	chosen := 0
	if hi-lo > s.balanceAbs && float64(hi) > s.balanceRel*float64(lo) {
		for i, c := range cands {
			if c.load < cands[chosen].load {
				chosen = i
			}
		}
	} else {
		best, rate := 0, -1.0
		for i, c := range cands {
			r := 0.0
			if p.length > 0 {
				r = float64(min(s.tree(c.name).prefix(p.keys)*p.block, p.length)) / float64(p.length)
			}
			if r > rate {
				best, rate = i, r
			}
		}
		chosen = best
		if rate <= s.cacheThreshold {
			for i, c := range cands {
				if len(s.tree(c.name).used) < len(s.tree(cands[chosen].name).used) {
					chosen = i
				}
			}
		}
	}
	s.insert(cands[chosen].name, p)
	rest := slices.Delete(slices.Clone(cands), chosen, chosen+1)
	slices.SortStableFunc(rest, func(a, b candidate) int { return cmp.Compare(a.load, b.load) })
	return append([]candidate{cands[chosen]}, rest...)
}

// tree is name's tree; s.mu is held.
func (s *sglang) tree(name string) *approxTree {
	t, ok := s.trees[name]
	if !ok {
		t = &approxTree{used: map[kvcache.Key]uint64{}}
		s.trees[name] = t
	}
	return t
}

func (t *approxTree) prefix(keys []kvcache.Key) int {
	for i, k := range keys {
		if _, ok := t.used[k]; !ok {
			return i
		}
	}
	return len(keys)
}

// insert adds p to name's tree and prunes it to its size; s.mu is held.
func (s *sglang) insert(name string, p prompt) {
	t := s.tree(name)
	s.clock++
	for _, k := range p.keys {
		t.used[k] = s.clock
	}
	limit := s.maxTreeTokens / p.block
	if len(t.used) <= limit {
		return
	}
	keys := make([]kvcache.Key, 0, len(t.used))
	for k := range t.used {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return t.used[keys[i]] < t.used[keys[j]] })
	for _, k := range keys[:len(keys)-limit] {
		delete(t.used, k)
	}
}

// dynamo is NVIDIA Dynamo's KV router (ai-dynamo/dynamo, docs/router and
// docs/design_docs/router_design.md) with its defaults
// --kv-overlap-score-weight 1 and --router-temperature 0 (the lowest cost
// wins; ties at random, here reproducibly by tieOrder). A worker's cost is
//
//	overlap_weight × potential prefill blocks + potential decode blocks
//
// where the prefill blocks are the prompt's tokens the worker does not hold
// (input − overlap blocks × block size) plus those of its turns still in
// prefill, over the block size, and the decode blocks are the blocks of its
// active turns plus the prompt's. The overlap is what the worker's KV
// events say it holds (Dynamo's KvIndexer): here the registry's match,
// which the router keeps from what each backend reports. Active blocks are
// counted at the prompt's length (their growth while generating is not
// followed).
type dynamo struct {
	overlapWeight float64
	active        activeSet
}

func newDynamo() *dynamo { return &dynamo{overlapWeight: 1} }

func (d *dynamo) rank(cands []candidate, p prompt) []candidate {
	cost := make(map[int]float64, len(cands))
	newTokens := make(map[int]int, len(cands))
	block := float64(p.block)
	for _, c := range cands {
		overlap := c.matched / p.block * p.block
		n := max(p.length-overlap, 0)
		ld := d.active.load(c.name)
		newTokens[c.index] = n
		cost[c.index] = d.overlapWeight*float64(ld.prefill+n)/block + float64(ld.tokens+p.length)/block
	}
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b candidate) int {
		if c := cmp.Compare(cost[a.index], cost[b.index]); c != 0 {
			return c
		}
		return tieOrder(p, a, b)
	})
	if len(out) > 0 {
		d.active.add(p.id, out[0].name, p.length, newTokens[out[0].index])
	}
	return out
}

func (d *dynamo) watch(p prompt, stream engine.StreamFunc) engine.StreamFunc {
	return d.active.watch(p, stream)
}

func (d *dynamo) ended(p prompt) { d.active.remove(p.id) }
