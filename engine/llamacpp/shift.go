package llamacpp

import (
	"slices"

	"kvwin/kvcache"
)

// Shifting (--shift): when the window evicts old turns, the prompt keeps
// its sinks and then continues with turns the slot holds further on. Rather
// than recompute those kept turns, their KV is moved down over the evicted
// ones (seq_rm, then seq_add: llama.cpp re-rotates the keys' positions),
// StreamingLLM-style. It is approximate — that KV was computed attending to
// the evicted turns — so it is opt-in, recorded under keys of its own, and
// reused only by requests that allow it.

const (
	shiftProbe  = 16 // tokens that locate the continuation in the slot
	shiftMinRun = 64 // shorter runs are cheaper to recompute than to move
)

// reusable is how much of t's prompt slot s holds that t may reuse: the
// common prefix, stopping where shifted KV starts unless t allows shifting.
func (l *loop) reusable(s *slot, t *task) int {
	if s.owner.Tenant != t.req.Tenant {
		return 0 // another tenant's KV: reusing it would tell t how much of its prompt they sent
	}
	n := min(kvcache.SharedPrefix(s.tokens, t.prompt), reuseLimit(len(t.prompt)))
	if s.shiftedAt >= 0 && !t.req.Shift {
		n = min(n, s.shiftedAt)
	}
	return n
}

// shift looks, past the reused prefix, for where the prompt's continuation
// sits further on in slot s; if it finds a run of at least shiftMinRun
// tokens in cells the slot owns, it moves that run down to follow the
// prefix and returns the new reuse count. The cells past the run are
// removed; the caller removes any past the returned count.
func (l *loop) shift(s *slot, prompt []int, reuse int) int {
	lctx := l.e.lctx
	j, m := findRun(s.tokens, prompt, reuse, max(s.shared, reuse+1))
	if j < 0 || m < shiftMinRun || !lctx.KvCacheCanShift() {
		return reuse
	}
	lctx.KvCacheSeqRm(s.id, j+m, -1)
	lctx.KvCacheSeqRm(s.id, reuse, j)
	lctx.KvCacheSeqAdd(s.id, j, j+m, reuse-j)
	s.tokens = append(s.tokens[:reuse], prompt[reuse:reuse+m]...)
	if s.shiftedAt < 0 || reuse < s.shiftedAt {
		s.shiftedAt = reuse
	}
	s.shifts++
	l.e.stats.Shifts.Add(1)
	return reuse + m
}

// findRun finds prompt[from:from+shiftProbe] in held at or after start and
// returns its position and how far the match extends (capped at
// reuseLimit: a prompt's last chunk is always computed); -1 if there is none.
func findRun(held, prompt []int, from, start int) (int, int) {
	if from+shiftProbe > reuseLimit(len(prompt)) {
		return -1, 0
	}
	probe := prompt[from : from+shiftProbe]
	for j := max(start, from+1); j+shiftProbe <= len(held); j++ {
		if !slices.Equal(held[j:j+shiftProbe], probe) {
			continue
		}
		m := shiftProbe
		for from+m < reuseLimit(len(prompt)) && j+m < len(held) && held[j+m] == prompt[from+m] {
			m++
		}
		return j, m
	}
	return -1, 0
}
