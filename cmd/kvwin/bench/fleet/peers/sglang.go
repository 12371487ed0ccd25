package peers

import (
	"cmp"
	"slices"
	"sort"
	"sync"

	"kvwin/kvcache"
	"kvwin/router"
)

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

func (s *sglang) Rank(cands []router.Candidate, p router.Prompt) []router.Candidate {
	if len(cands) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := cands[0].Load, cands[0].Load
	for _, c := range cands {
		lo, hi = min(lo, c.Load), max(hi, c.Load)
	}
	chosen := 0
	if hi-lo > s.balanceAbs && float64(hi) > s.balanceRel*float64(lo) {
		for i, c := range cands {
			if c.Load < cands[chosen].Load {
				chosen = i
			}
		}
	} else {
		best, rate := 0, -1.0
		for i, c := range cands {
			r := 0.0
			if p.Length > 0 {
				r = float64(min(s.tree(c.Name).prefix(p.Keys)*p.BlockTokens, p.Length)) / float64(p.Length)
			}
			if r > rate {
				best, rate = i, r
			}
		}
		chosen = best
		if rate <= s.cacheThreshold {
			for i, c := range cands {
				if len(s.tree(c.Name).used) < len(s.tree(cands[chosen].Name).used) {
					chosen = i
				}
			}
		}
	}
	s.insert(cands[chosen].Name, p)
	rest := slices.Delete(slices.Clone(cands), chosen, chosen+1)
	slices.SortStableFunc(rest, func(a, b router.Candidate) int { return cmp.Compare(a.Load, b.Load) })
	return append([]router.Candidate{cands[chosen]}, rest...)
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
func (s *sglang) insert(name string, p router.Prompt) {
	t := s.tree(name)
	s.clock++
	for _, k := range p.Keys {
		t.used[k] = s.clock
	}
	limit := s.maxTreeTokens / p.BlockTokens
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
