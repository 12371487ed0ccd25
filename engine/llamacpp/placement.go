package llamacpp

// slotView is what slot placement needs to know about a slot.
type slotView struct {
	tokens   []int  // tokens whose KV the slot holds, positions 0..len-1
	prompt   int    // how many of them were the last request's prompt (the rest were generated)
	busy     bool   // serving a request now
	lastUsed uint64 // logical clock of its last request; larger is more recent
}

// placement says where a prompt runs and what it reuses.
type placement struct {
	target int // slot that serves the request
	source int // slot whose prefix is copied into target first; -1 for none
	reuse  int // prompt tokens whose KV is reused (from target, or from source after the copy)
}

// place chooses the slot for prompt, given how much of it each slot holds
// (lcp[i], at most limit, known to block granularity from the
// registry). slots must contain at least one idle slot; pinned ≥ 0 forces
// the target (it must be idle); noCache reuses nothing. The caller refines
// the reuse count against the actual tokens.
//
// The rule, in order:
//  1. The target is the idle slot this prompt continues: one whose last prompt
//     the new prompt extends whole (an empty slot qualifies trivially), with
//     the longest common prefix. That is the same conversation's next turn;
//     what it loses is at most the tail of its own last answer, which the
//     client re-sent in its own words. A slot that shares only a prefix (a
//     system prompt) with this prompt holds another conversation and is not
//     overwritten while another slot is free.
//  2. If every idle slot holds mostly something else, the least recently used
//     idle slot is taken.
//  3. If another slot (idle or busy) shares a longer prefix than the target,
//     that prefix is forked into the target (KvCacheSeqCp) instead of being
//     recomputed; so two conversations sharing a system prompt compute it once
//     and each keeps its own slot.
//
// The last lastChunk prompt tokens are always left to compute (limit): the
// last one's logits give the first generated token (see chunk.go).
func place(slots []slotView, lcp []int, limit, block int, pinned int, noCache bool) placement {
	p := placement{target: pinned, source: -1}
	if p.target < 0 {
		for i, s := range slots {
			if s.busy || lcp[i] < min(s.prompt, limit)/block*block || noCache && len(s.tokens) > 0 {
				continue
			}
			if p.target < 0 || lcp[i] > lcp[p.target] {
				p.target = i
			}
		}
	}
	if p.target < 0 {
		for i, s := range slots {
			if !s.busy && (p.target < 0 || s.lastUsed < slots[p.target].lastUsed) {
				p.target = i
			}
		}
	}
	if noCache {
		return p
	}
	p.reuse = lcp[p.target]
	for i := range slots {
		if i != p.target && lcp[i] > p.reuse {
			p.source, p.reuse = i, lcp[i]
		}
	}
	return p
}
