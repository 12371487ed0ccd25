package llamaserver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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

var _ engine.SlotReader = (*Backend)(nil)

// slotBody is one slot of GET /slots, in every shape servers send:
//
//	llama-server, older (June 2025, only with --slots): id, n_ctx,
//	    is_processing, prompt (the last prompt's text, BOS included), …
//	llama-server, newer (served by default): id, n_ctx, is_processing and,
//	    once the slot served a task, n_prompt_tokens (what its KV holds,
//	    the generated tokens included) and n_prompt_tokens_cache; the
//	    prompt text only in a debug mode. Its /props has endpoint_slots.
//	kvwin node: id, n_ctx, is_processing, n_tokens
type slotBody struct {
	ID            int     `json:"id"`
	NCtx          int     `json:"n_ctx"`
	IsProcessing  bool    `json:"is_processing"`
	NTokens       *int    `json:"n_tokens"`
	NPromptTokens *int    `json:"n_prompt_tokens"`
	Prompt        *string `json:"prompt"`
}

// FetchSlots asks the server for its slots (GET /slots) and keeps the
// answer for Slots. Tokens is what the slot holds as ReadSlots counts it.
// It blocks for at most Config.Timeout (and /tokenize, see ReadSlots).
func (b *Backend) FetchSlots(ctx context.Context) ([]engine.SlotState, error) {
	if _, err := b.ReadSlots(ctx); err != nil {
		return nil, err
	}
	return b.Slots(), nil
}

// getSlots reads GET /slots and keeps it for Slots. A server that does not
// serve it (501, llama-server without --slots) gives an error wrapping
// engine.ErrNotSupported.
func (b *Backend) getSlots(ctx context.Context) ([]slotBody, error) {
	var body []slotBody
	if err := b.call(ctx, http.MethodGet, "/slots", nil, &body); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusNotImplemented {
			return nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
		}
		return nil, err
	}
	for _, s := range body {
		if s.NPromptTokens != nil {
			b.slotCounts.Store(true)
		}
	}
	return body, nil
}

// ReadSlots asks the server what its slots hold (see engine.SlotReader):
// the token ids of a slot's prompt where the server gives its text
// (tokenized by the server's /tokenize, control tokens parsed, BOS put
// first if the text lacks it, as the server adds it), else its count.
// Slots still processing get no tokens: their prompt is not settled. It
// blocks on /slots and, for a prompt not seen before, /tokenize.
func (b *Backend) ReadSlots(ctx context.Context) ([]engine.SlotContent, error) {
	body, err := b.getSlots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]engine.SlotContent, len(body))
	states := make([]engine.SlotState, len(body))
	for i, s := range body {
		c := engine.SlotContent{ID: s.ID, Processing: s.IsProcessing, Count: -1}
		switch {
		case s.NTokens != nil:
			c.Count = *s.NTokens
		case s.NPromptTokens != nil:
			c.Count = *s.NPromptTokens
		case s.Prompt == nil && b.slotCounts.Load():
			// A server that counts its slots' tokens leaves the count
			// out of a slot that served nothing since it started.
			c.Count = 0
		}
		if s.Prompt != nil && !s.IsProcessing {
			if *s.Prompt == "" {
				c.Tokens = []int{}
			} else if c.Tokens, err = b.slotTokens(ctx, *s.Prompt); err != nil {
				return nil, err
			}
			if c.Count < 0 {
				c.Count = len(c.Tokens)
			}
		}
		out[i] = c
		states[i] = engine.SlotState{ID: s.ID, Context: s.NCtx, Processing: s.IsProcessing, Tokens: max(c.Count, 0)}
	}
	b.mu.Lock()
	b.slots = states
	b.mu.Unlock()
	return out, nil
}

// slotTokens tokenizes a slot's prompt text, remembering the last texts
// tokenized: a poll every few seconds of slots that did not change costs
// no /tokenize.
func (b *Backend) slotTokens(ctx context.Context, text string) ([]int, error) {
	h := fnv.New64a()
	h.Write([]byte(text))
	sum := h.Sum64()
	b.mu.Lock()
	ids, ok := b.slotIDs[sum]
	b.mu.Unlock()
	if ok {
		return slices.Clone(ids), nil
	}
	st, err := b.current(ctx, true)
	if err != nil {
		return nil, err
	}
	if ids, err = b.TokenizeSpecial(ctx, text, false, true); err != nil {
		return nil, err
	}
	if bos := st.chat.bos; len(bos) > 0 && !slices.Equal(ids[:min(len(ids), len(bos))], bos) {
		ids = append(slices.Clone(bos), ids...)
	}
	b.mu.Lock()
	if b.slotIDs == nil || len(b.slotIDs) >= maxSlotTexts {
		b.slotIDs = map[uint64][]int{}
	}
	b.slotIDs[sum] = ids
	b.mu.Unlock()
	return slices.Clone(ids), nil
}

// maxSlotTexts bounds the slot prompts remembered tokenized.
const maxSlotTexts = 256

// Slots returns the slots as the last FetchSlots found them, nil before the
// first. It does not block: a remote server's slots are only as fresh as
// the caller's polling, and a router must not stall on a hung server here.
func (b *Backend) Slots() []engine.SlotState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.slots)
}
