package web

import (
	"time"

	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
)

// ollamaEncoder renders /api/chat's and /api/generate's objects: one per
// piece of text with done false, then one with done true carrying the
// done_reason and the metrics (the text is in the pieces, so the last
// object's is empty, as Ollama's).
//
// The metrics mean what Ollama's mean: prompt_eval_count is the prompt's
// tokens, reused from the KV cache or not; prompt_eval_duration the time
// actually spent on the rest (so reuse shows as a short duration);
// eval_count and eval_duration the generated tokens and their time;
// total_duration the request's time in kvwin; load_duration the time before
// the backend had the request (reading, windowing), since kvwin's model is
// loaded before it serves.
type ollamaEncoder struct {
	chat  bool   // /api/chat's objects, else /api/generate's
	model string // as the client named it, as Ollama echoes it
	now   func() time.Time
	start time.Time // the request's arrival
	ready time.Time // when the request went to the backend
}

var _ encoder = (*ollamaEncoder)(nil)

// object is one response object with text and, when done, its end.
func (e *ollamaEncoder) object(text string, done bool, reason string, m oapi.Metrics) any {
	created := e.now().UTC()
	if e.chat {
		return oapi.ChatResponse{Model: e.model, CreatedAt: created,
			Message: oapi.Message{Role: engine.RoleAssistant, Content: text}, Done: done, DoneReason: reason, Metrics: m}
	}
	return oapi.GenerateResponse{Model: e.model, CreatedAt: created, Response: text, Done: done, DoneReason: reason, Metrics: m}
}

// metrics are the Ollama metrics of a finished generation.
func (e *ollamaEncoder) metrics(res engine.Result) oapi.Metrics {
	t := res.Timings
	generated := t.GeneratedTokens
	if generated == 0 {
		generated = len(res.Tokens) // a backend that did not count them
	}
	m := oapi.Metrics{
		TotalDuration: time.Since(e.start), PromptEvalCount: t.PromptTokens, PromptEvalDuration: t.PromptEval,
		EvalCount: generated, EvalDuration: t.Decode,
	}
	if !e.ready.IsZero() {
		m.LoadDuration = e.ready.Sub(e.start)
	}
	return m
}

// loaded is the answer to a request with nothing to generate.
func (e *ollamaEncoder) loaded(reason string) any {
	return e.object("", true, reason, oapi.Metrics{})
}

func (e *ollamaEncoder) whole(res engine.Result) any {
	return e.object(res.Text, true, finishReason(res), e.metrics(res))
}

func (e *ollamaEncoder) open(ev engine.Event) []any {
	if ev.Text == "" {
		return nil
	}
	return e.text(ev.Text)
}

func (e *ollamaEncoder) text(s string) []any {
	return []any{e.object(s, false, "", oapi.Metrics{})}
}

func (e *ollamaEncoder) end(res engine.Result) []any {
	return []any{e.object("", true, finishReason(res), e.metrics(res))}
}

func (e *ollamaEncoder) streamError(err error) any {
	_, body := classify(err)
	return map[string]string{"error": body.Message}
}
