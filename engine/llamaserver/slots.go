package llamaserver

import (
	"context"
	"net/http"
	"slices"

	"kvwin/engine"
)

// Health asks the server whether it can serve (GET /health). It returns nil
// for 200 and an error wrapping engine.ErrUnavailable otherwise (a
// llama-server answers 503 while it loads its model). It blocks for at most
// Config.Timeout.
func (b *Backend) Health(ctx context.Context) error {
	var body struct {
		Status string `json:"status"`
	}
	return b.call(ctx, http.MethodGet, "/health", nil, &body)
}

// FetchSlots asks the server for its slots (GET /slots) and keeps the
// answer for Slots. llama-server reports id, n_ctx and is_processing; a
// kvwin node also n_tokens, the tokens the slot's KV holds. It blocks for at
// most Config.Timeout.
func (b *Backend) FetchSlots(ctx context.Context) ([]engine.SlotState, error) {
	var slots []engine.SlotState
	if err := b.call(ctx, http.MethodGet, "/slots", nil, &slots); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.slots = slots
	b.mu.Unlock()
	return slices.Clone(slots), nil
}

// Slots returns the slots as the last FetchSlots found them, nil before the
// first. It does not block: a remote server's slots are only as fresh as
// the caller's polling, and a router must not stall on a hung server here.
func (b *Backend) Slots() []engine.SlotState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.slots)
}
