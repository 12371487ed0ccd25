package ollama

import (
	"time"

	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
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
//
// With tools, the answer goes through a toolcall.Parser: a call
// is sent once its arguments are complete, whole, in an object of its own
// with message.tool_calls, as Ollama sends it (tools.go).
type ollamaEncoder struct {
	chat  bool   // /api/chat's objects, else /api/generate's
	model string // as the client named it, as Ollama echoes it
	now   func() time.Time
	start time.Time        // the request's arrival
	ready time.Time        // when the request went to the backend
	calls *toolcall.Parser // nil without tools
	sent  int              // calls already sent
}

var (
	_ core.Encoder    = (*ollamaEncoder)(nil)
	_ core.KeepAliver = (*ollamaEncoder)(nil)
)

// KeepAlive is an object with no text and done false: NDJSON has no
// comment, and Ollama's own client fails on any line that is not an
// object (a blank one included), while one with empty content is a piece
// of nothing, as Ollama itself sends around a tool call.
func (e *ollamaEncoder) KeepAlive() any { return e.object("", false, "", oapi.Metrics{}) }

// object is one response object with text and, when done, its end.
func (e *ollamaEncoder) object(text string, done bool, reason string, m oapi.Metrics) any {
	return e.callObject(text, nil, done, reason, m)
}

// callObject is object with tool calls (on /api/chat).
func (e *ollamaEncoder) callObject(text string, calls []oapi.ToolCall, done bool, reason string, m oapi.Metrics) any {
	created := e.now().UTC()
	if e.chat {
		return oapi.ChatResponse{Model: e.model, CreatedAt: created,
			Message: oapi.Message{Role: engine.RoleAssistant, Content: text, ToolCalls: calls}, Done: done, DoneReason: reason, Metrics: m}
	}
	return oapi.GenerateResponse{Model: e.model, CreatedAt: created, Response: text, Done: done, DoneReason: reason, Metrics: m}
}

// metrics are the Ollama metrics of a finished generation.
func (e *ollamaEncoder) metrics(res engine.Result) oapi.Metrics {
	t := res.Timings
	generated := core.OutputTokens(res)
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

func (e *ollamaEncoder) Whole(res engine.Result) any {
	if e.calls == nil {
		return e.object(res.Text, true, core.FinishReason(res), e.metrics(res))
	}
	content := e.calls.Feed(res.Text).Content + e.calls.Flush().Content
	calls, rest, _ := ollamaCalls(e.calls, 0, true)
	return e.callObject(content+rest, calls, true, core.FinishReason(res), e.metrics(res))
}

func (e *ollamaEncoder) Open(ev engine.Event) []any {
	if ev.Text == "" {
		return nil
	}
	return e.Text(ev.Text)
}

func (e *ollamaEncoder) Text(s string) []any {
	if e.calls == nil {
		return []any{e.object(s, false, "", oapi.Metrics{})}
	}
	return e.parsed(e.calls.Feed(s).Content, false)
}

// parsed renders content the parser let through and the calls it has
// completed since the last ones sent (all of them when final).
func (e *ollamaEncoder) parsed(content string, final bool) []any {
	var out []any
	calls, rest, next := ollamaCalls(e.calls, e.sent, final)
	e.sent = next
	if content += rest; content != "" {
		out = append(out, e.object(content, false, "", oapi.Metrics{}))
	}
	if len(calls) > 0 {
		out = append(out, e.callObject("", calls, false, "", oapi.Metrics{}))
	}
	return out
}

func (e *ollamaEncoder) End(res engine.Result) []any {
	var out []any
	if e.calls != nil {
		out = e.parsed(e.calls.Flush().Content, true)
	}
	return append(out, e.object("", true, core.FinishReason(res), e.metrics(res)))
}

func (e *ollamaEncoder) StreamError(err error) any {
	_, body := core.Classify(err)
	return map[string]string{"error": body.Message}
}
