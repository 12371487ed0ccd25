package llamacpp

import (
	"context"
	"fmt"

	"kvwin/kvcache"
)

// Forgetting a conversation (DELETE /kvwin/v1/conversations/{id}, or its
// --memory-ttl expiry) takes every copy of its tokens: the KV its slots
// still hold, the snapshot saves queued for it, and its snapshot files. The
// slots go first, in the loop that owns them, so that no later placement
// can save a snapshot of the deleted conversation's KV; then the store
// cancels queued saves and deletes files.

// forgetOp asks the loop to clear the slots an owner holds.
type forgetOp struct {
	owner kvcache.Owner
	done  chan int // how many slots held the owner's KV
}

// ForgetConversation deletes everything the engine holds of a tenant's
// conversation — its slots' KV (a slot generating for it now is cleared
// when the generation ends), the snapshot saves queued for it and its
// snapshot files — and returns how many slots and snapshots held some. It
// blocks until the loop has cleared the slots (or ctx ends, or the engine
// is closed) and the files are removed; safe for concurrent use.
func (e *Engine) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	owner := kvcache.Owner{Tenant: tenant, Conversation: conversation}
	op := forgetOp{owner: owner, done: make(chan int, 1)}
	slots := 0
	select {
	case e.forgets <- op:
		select {
		case slots = <-op.done:
		case <-e.stopped:
		case <-ctx.Done():
			return 0, fmt.Errorf("forget conversation: %w", ctx.Err())
		}
	case <-e.stopped: // closed: no slot holds anything any more
	case <-ctx.Done():
		return 0, fmt.Errorf("forget conversation: %w", ctx.Err())
	}
	return slots + e.kv.forget(owner), nil
}

// forget clears the slots holding op's owner: idle ones now, a busy one
// when its generation ends (finish). Loop only.
func (l *loop) forget(op forgetOp) {
	n := 0
	for _, s := range l.slots {
		if s.owner != op.owner || (len(s.tokens) == 0 && s.task == nil) {
			continue
		}
		n++
		if s.task != nil {
			s.forget = true
			continue
		}
		l.clear(s)
	}
	op.done <- n
}

// clear empties slot s: its KV is removed, the registry forgets it, and it
// holds nobody's tokens. Loop only; s must be idle.
func (l *loop) clear(s *slot) {
	l.e.lctx.KvCacheSeqRm(s.id, 0, -1)
	s.tokens, s.prompt, s.shared, s.shiftedAt, s.forget = s.tokens[:0], 0, 0, -1, false
	s.owner = kvcache.Owner{}
	l.record(s, true, nil)
	l.e.mu.Lock()
	l.e.views[s.id].Tokens, l.e.views[s.id].Tenant = 0, ""
	l.e.mu.Unlock()
}
