package router

import (
	"context"
	"errors"
	"fmt"

	"kvwin/engine"
)

// The router has each optional ability its backends have, by delegating,
// so a gateway answers the node routes (/tokenize, /detokenize, /slots,
// /props) as a node does.
var (
	_ engine.Tokenizer             = (*Router)(nil)
	_ engine.SpecialTokenizer      = (*Router)(nil)
	_ engine.MessageCounter        = (*Router)(nil)
	_ engine.Prompter              = (*Router)(nil)
	_ engine.SlotReporter          = (*Router)(nil)
	_ engine.SlotFetcher           = (*Router)(nil)
	_ engine.ChatTemplater         = (*Router)(nil)
	_ engine.ToolTemplater         = (*Router)(nil)
	_ engine.ConversationForgetter = (*Router)(nil)
)

// errNoAbility: no backend of the fleet can do what was asked.
var errNoAbility = fmt.Errorf("no backend of this gateway can: %w", engine.ErrNotSupported)

// delegate calls fn on the backends that have ability A, healthy ones
// first, until one succeeds or fails with an error that is not worth
// retrying elsewhere. All backends serve the same model, so any of them
// tokenizes alike.
func delegate[A any, T any](r *Router, fn func(A) (T, error)) (T, error) {
	var zero T
	var errs []error
	for _, healthy := range []bool{true, false} {
		for _, m := range r.fleet() {
			a, ok := engine.As[A](m.backend)
			if !ok || m.state.Available() != healthy {
				continue
			}
			out, err := fn(a)
			if err == nil {
				return out, nil
			}
			if !retryable(err) {
				return zero, public(err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		}
	}
	if len(errs) == 0 {
		return zero, errNoAbility
	}
	return zero, public(errors.Join(errs...))
}

// Tokenize tokenizes with the first healthy backend that can. It blocks on
// that backend.
func (r *Router) Tokenize(ctx context.Context, text string, special bool) ([]int, error) {
	return delegate(r, func(t engine.Tokenizer) ([]int, error) { return t.Tokenize(ctx, text, special) })
}

// TokenizeSpecial tokenizes with llama.cpp's two flags apart, with the
// first healthy backend that can; a backend with only Tokenize serves the
// case where both flags are equal.
func (r *Router) TokenizeSpecial(ctx context.Context, text string, addSpecial, parseSpecial bool) ([]int, error) {
	ids, err := delegate(r, func(t engine.SpecialTokenizer) ([]int, error) {
		return t.TokenizeSpecial(ctx, text, addSpecial, parseSpecial)
	})
	if errors.Is(err, errNoAbility) && addSpecial == parseSpecial {
		return r.Tokenize(ctx, text, addSpecial)
	}
	return ids, err
}

// Prompt renders req into prompt tokens with the first healthy backend
// that can (all serve the same model, so any renders alike). It blocks on
// that backend.
func (r *Router) Prompt(ctx context.Context, req engine.Request) ([]int, error) {
	return delegate(r, func(p engine.Prompter) ([]int, error) { return p.Prompt(ctx, req) })
}

// Detokenize turns tokens into text with the first healthy backend that
// can. It blocks on that backend.
func (r *Router) Detokenize(ctx context.Context, tokens []int) (string, error) {
	return delegate(r, func(t engine.Tokenizer) (string, error) { return t.Detokenize(ctx, tokens) })
}

// Slots lists every backend's slots, numbered across the fleet in the
// order of the backends (backend 0's slots first), as its Info counts
// them. It does not block: remote slots are as fresh as the last poll.
func (r *Router) Slots() []engine.SlotState {
	var out []engine.SlotState
	offset := 0
	for _, m := range r.fleet() {
		n := m.backend.Info().Slots
		if rep, ok := engine.As[engine.SlotReporter](m.backend); ok {
			for _, s := range rep.Slots() {
				s.ID += offset
				out = append(out, s)
				n = max(n, s.ID-offset+1)
			}
		}
		offset += n
	}
	return out
}

// FetchSlots asks every backend that can for its slots now (the others
// report what they know) and numbers them as Slots does. A backend that
// does not answer contributes what it last reported. It blocks on the
// backends, one after the other.
func (r *Router) FetchSlots(ctx context.Context) ([]engine.SlotState, error) {
	for _, m := range r.fleet() {
		if f, ok := engine.As[engine.SlotFetcher](m.backend); ok && m.state.Available() {
			if _, err := f.FetchSlots(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				r.log.Debug("backend slots not fetched", "backend", m.name, "err", err)
			}
		}
	}
	return r.Slots(), nil
}

// ChatTemplate is the chat template of the first backend that knows one.
func (r *Router) ChatTemplate() string {
	for _, m := range r.fleet() {
		if t, ok := engine.As[engine.ChatTemplater](m.backend); ok {
			if s := t.ChatTemplate(); s != "" {
				return s
			}
		}
	}
	return ""
}

// TemplateTools reports whether every backend's template renders tools:
// a request may go to any of them, and the chat handler renders tools one
// way for all.
func (r *Router) TemplateTools() bool {
	for _, m := range r.fleet() {
		t, ok := engine.As[engine.ToolTemplater](m.backend)
		if !ok || !t.TemplateTools() {
			return false
		}
	}
	return len(r.fleet()) > 0
}
