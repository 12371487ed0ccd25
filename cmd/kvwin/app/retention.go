package app

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"kvwin/engine"
	"kvwin/window"
	"kvwin/window/memory"
)

// Retention: --memory-ttl bounds how long a conversation's content stays on
// disk. Two things hold it: the memory store's turns (SQLite) and the
// engine's KV snapshots, which store the conversation's token ids. Both
// expire what has not been used for the TTL, each on its own sweep (at
// start, then every TTL/4, at least hourly); and when the memory store
// expires a named conversation, its snapshots go with it, as on DELETE.

// expiryHook is the memory store's Expired function: it deletes an expired
// conversation's snapshots through the current generation's backend. It is
// shared by every generation, like the store; its own lock, not
// sharedState's, since the store calls it while it is being opened.
type expiryHook struct {
	mu        sync.Mutex
	forget    engine.ConversationForgetter
	log       *slog.Logger
	snapshots atomic.Int64 // snapshots deleted with their conversations
}

// use makes b the backend whose snapshots expire with their conversations
// (nil, or a backend without snapshots: none).
func (h *expiryHook) use(b engine.Backend) {
	f, _ := engine.As[engine.ConversationForgetter](b)
	h.mu.Lock()
	h.forget = f
	h.mu.Unlock()
}

// expired deletes k's snapshots. It blocks until they are deleted (or a
// remote backend's DELETE gives up).
func (h *expiryHook) expired(k memory.Key) {
	h.mu.Lock()
	f := h.forget
	h.mu.Unlock()
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := f.ForgetConversation(ctx, k.Tenant, k.Conversation)
	h.snapshots.Add(int64(n))
	if err != nil && h.log != nil {
		h.log.Warn("an expired conversation's snapshots were not all deleted; they expire on their own TTL",
			"tenant", k.Tenant, "conversation", k.Conversation, "err", err)
	}
}

// Expiry is what one sweep of --memory-ttl deleted.
type Expiry struct {
	Conversations         int // named conversations whose turns expired
	ConversationSnapshots int // their KV snapshots, deleted with them
	IdleSnapshots         int // KV snapshots not used for the TTL
}

// Expire runs the --memory-ttl sweep now, as the background loops do on
// their own: the memory store's conversations (and their snapshots), then
// the snapshots idle past the TTL. With no TTL it deletes nothing. It
// blocks on disk; exported for tests and operators' tools.
func (a *App) Expire(ctx context.Context) (Expiry, error) {
	cur := a.current()
	var out Expiry
	var err error
	if st, ok := cur.store.(window.StoreExpirer); ok {
		before := a.shared.hook.snapshots.Load()
		out.Conversations, err = st.Expire(ctx)
		out.ConversationSnapshots = int(a.shared.hook.snapshots.Load() - before)
	}
	// The embedded engine, or a catalog (which sweeps every model's).
	if e, ok := engine.As[engine.SnapshotExpirer](cur.backend); ok {
		out.IdleSnapshots = e.ExpireSnapshots()
	}
	return out, err
}
