package fleet

import "slices"

// llama-server's host-memory prompt cache (--cache-ram, 8,192 MiB by
// default since the autumn 2025 builds; the August 2026 build that
// docs/fleet.md measured has it), as tools/server runs it
// (server_prompt_cache and get_available_slot in server-context.cpp):
//
//   - When a request takes a slot that would keep less than half of what
//     it holds (f_keep = LCP / slot tokens < 0.5), or that the server chose
//     as least recently used, the slot's prompt is saved to the cache and
//     the cached prompt that suits the request best is loaded into the
//     slot. An empty slot loads nothing (its share kept is 0/0, which no
//     entry's beats: llama.cpp #28139).
//   - Saving skips a prompt some entry holds whole, drops the entries the
//     prompt holds whole, and evicts the oldest entries until it fits; a
//     prompt larger than the whole cache is not saved.
//   - Loading takes the entry whose common prefix with the request is a
//     larger share both of the entry and of the request than the slot's
//     own, among entries keeping at least a quarter of themselves
//     (f_keep ≥ 0.25: a long prompt is not thrown away for a short
//     match); the entry leaves the cache for the slot.
//
// Moving KV between the GPU and host memory takes its bytes over the host
// link (NodeModel.HostBandwidth), in the server's loop, before the
// prompt's prefill. The cache holds views of the conversations' streams,
// so it costs the simulation nothing.
type promptCache struct {
	limit   int     // tokens it holds at most: --cache-ram over the KV bytes of a token
	entries [][]int // oldest first
	tokens  int
}

// newPromptCache is a cache of bytes for KV of perToken bytes a token;
// nil if it holds no token.
func newPromptCache(bytes int64, perToken int) *promptCache {
	if bytes <= 0 || perToken <= 0 || bytes/int64(perToken) < 1 {
		return nil
	}
	return &promptCache{limit: int(bytes / int64(perToken))}
}

// save stores kv (see the file comment) and reports whether it did.
func (c *promptCache) save(kv []int) bool {
	if len(kv) == 0 || len(kv) > c.limit {
		return false
	}
	for _, e := range c.entries {
		if lcp(e, kv) == len(kv) {
			return false
		}
	}
	kept := c.entries[:0]
	for _, e := range c.entries {
		if lcp(e, kv) == len(e) {
			c.tokens -= len(e)
			continue
		}
		kept = append(kept, e)
	}
	clear(c.entries[len(kept):])
	c.entries = kept
	for len(c.entries) > 0 && c.tokens+len(kv) > c.limit {
		c.tokens -= len(c.entries[0])
		c.entries[0] = nil
		c.entries = c.entries[1:]
	}
	c.entries = append(c.entries, kv)
	c.tokens += len(kv)
	return true
}

// load takes out of the cache the entry that suits prompt p better than
// the slot's own kv (see the file comment); nil if none does.
func (c *promptCache) load(kv, p []int) []int {
	if len(p) == 0 || len(kv) == 0 {
		return nil
	}
	own := lcp(kv, p)
	keep, sim := float64(own)/float64(len(kv)), float64(own)/float64(len(p))
	best := -1
	for i, e := range c.entries {
		l := lcp(e, p)
		k, s := float64(l)/float64(len(e)), float64(l)/float64(len(p))
		if k < 0.25 {
			continue
		}
		if k > keep && s > sim {
			keep, sim, best = k, s, i
		}
	}
	if best < 0 {
		return nil
	}
	e := c.entries[best]
	c.tokens -= len(e)
	c.entries = slices.Delete(c.entries, best, best+1)
	return e
}
