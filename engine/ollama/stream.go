package ollama

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
)

// Ollama streams a generation as NDJSON, one object per line:
//
//	{"model":"m","created_at":"…","message":{"role":"assistant","content":"Hel"},"done":false}
//	…
//	{"model":"m","created_at":"…","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,
//	 "total_duration":…,"load_duration":…,"prompt_eval_count":2030,"prompt_eval_duration":308731467,
//	 "eval_count":8,"eval_duration":5792074}
//
// (/api/generate says "response" where /api/chat says "message".) Only the
// final object carries the metrics; an error after the first line arrives as
// {"error":"…"}. Contents are JSON strings, which Ollama's encoder and Go's
// decoder keep valid UTF-8, so no event splits a character.

// maxAnswerBytes bounds the text of one answer (as llama-server
// backends' Config.MaxAnswerBytes; Ollama's client bounds each line).
const maxAnswerBytes = 16 << 20

// errStop ends the reading of a stream after its final object.
var errStop = errors.New("final response read")

// generation is the state of one streamed answer being read, by the
// goroutine that reads it (drain.go); mu orders its lines against the
// caller leaving.
type generation struct {
	mu        sync.Mutex
	abandoned bool          // the caller left: lines are drained, not relayed
	gone      chan struct{} // closed when the StreamFunc failed

	ctx       context.Context // the caller's
	op        string
	idle      time.Duration // Config.IdleTimeout
	firstWait time.Duration // Config.FirstTokenTimeout
	stream    engine.StreamFunc
	probe     *probe
	sent      time.Time

	numCtx int // the num_ctx sent

	// Estimates made before sending (see Backend.Generate).
	likely      int // likely prompt tokens
	textBytes   int // bytes of the canonical rendering
	cachedBytes int // of them, held by a slot of the server

	// maxTokens bounds the streamed objects with text relayed (Ollama
	// streams one a token), maxText their text: a server that goes on
	// past num_predict is cut there, the answer finishing with "length".
	maxTokens, maxText, pieces int

	streamErr error          // what the caller's StreamFunc returned
	started   bool           // the first event was produced: something was generated
	first     engine.Timings // the first event's timings
	text      strings.Builder
	done      bool
	reason    string
	metrics   api.Metrics
}

// estimate is the prompt side of the timings before Ollama's final
// response: kvwin's estimates, the measured time to the first token, and no
// prompt-eval time (Ollama reports it only at the end).
func (g *generation) estimate() engine.Timings {
	return engine.Timings{
		PromptTokens:    g.likely,
		CachedTokens:    cachedTokens(g.likely, g.cachedBytes, g.textBytes),
		CachedEstimated: true,
		FirstToken:      time.Since(g.sent),
	}
}

// timings are the final timings: Ollama's counts and durations, the cached
// tokens estimated in proportion of the exact prompt.
func (g *generation) timings() engine.Timings {
	t := g.first
	m := g.metrics
	if m.PromptEvalCount > 0 {
		t.PromptTokens = m.PromptEvalCount
	}
	t.CachedTokens = cachedTokens(t.PromptTokens, g.cachedBytes, g.textBytes)
	t.CachedEstimated = true
	t.PromptEval = m.PromptEvalDuration
	t.GeneratedTokens = m.EvalCount
	t.Decode = m.EvalDuration
	return t
}

// add takes one streamed object: it streams its text (the first object as
// the First event) and, for the final one, keeps the metrics and returns
// errStop.
func (g *generation) add(content string, done bool, reason string, m api.Metrics) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return g.drained(content, done)
	}
	if !done && content != "" {
		if g.pieces++; g.pieces > g.maxTokens || g.text.Len()+len(content) > g.maxText {
			// Past the bounds: not relayed, and the answer ends here.
			content, done, reason = "", true, "length"
			m = api.Metrics{EvalCount: g.pieces - 1}
		}
	}
	ev := engine.Event{Text: content, Slot: -1}
	if done {
		g.done, g.reason, g.metrics = true, reason, m
	}
	if !g.started {
		g.started = true
		g.probe.dog.Started()
		ev.First = true
		g.first = g.estimate()
		ev.Timings = g.first
		if done {
			ev.Timings = g.timings()
		}
	}
	g.text.WriteString(content)
	if g.stream != nil && (ev.First || ev.Text != "") {
		g.probe.dog.Pause()
		err := g.stream(ev)
		g.probe.dog.Kick()
		if err != nil {
			// The caller's Generate returns err now; the rest of the
			// answer is drained.
			g.streamErr, g.abandoned = err, true
			close(g.gone)
			return g.drained("", done)
		}
	}
	if done {
		return errStop
	}
	return nil
}

// finish turns the end of the api client's call into the result or the
// error. err is what the call returned.
func (g *generation) finish(err error) (engine.Result, error) {
	if g.done {
		if n := g.metrics.PromptEvalCount; g.numCtx > 0 && n >= g.numCtx {
			// Ollama's runner cut a prompt longer than num_ctx to exactly
			// num_ctx tokens (or it filled the context, leaving no room
			// for an answer): what it answered is not the prompt sent. How
			// long the prompt was is not reported; the estimate says.
			return engine.Result{}, fmt.Errorf("ollama: %s: %w", g.op,
				&engine.ContextLengthError{PromptTokens: max(g.likely, n), Limit: g.numCtx})
		}
		// Whatever came after the final object (nothing, or garbage) does
		// not change the answer.
		return engine.Result{
			Text: g.text.String(), FinishReason: finishReason(g.reason), Slot: -1, Timings: g.timings(),
		}, nil
	}
	status := g.probe.status
	switch {
	case g.ctx.Err() != nil:
		return engine.Result{}, fmt.Errorf("ollama: %s: %w", g.op, g.ctx.Err())
	case g.probe.dog.Fired() && !g.started:
		return engine.Result{}, fmt.Errorf("ollama: %s: %w: no first token within %v", g.op, engine.ErrTimeout, g.firstWait)
	case status == 0 && !g.started && isTimeout(err):
		return engine.Result{}, fmt.Errorf("ollama: %s: %w: %w", g.op, engine.ErrTimeout, err)
	case g.probe.dog.Fired():
		return engine.Result{}, engine.Public(fmt.Errorf("ollama: %s: the server sent nothing for %v mid-stream: the answer is cut short", g.op, g.idle),
			fmt.Sprintf("the backend sent nothing for %v mid-stream: the answer is cut short", g.idle))
	case status == 0 && err != nil:
		// No response at all: refused, reset, DNS, TLS.
		return engine.Result{}, fmt.Errorf("ollama: %s: %w (%w)", g.op, engine.ErrUnavailable, err)
	case status >= http.StatusBadRequest:
		return engine.Result{}, statusError(g.op, status, g.probe.errBody, err)
	}
	if err == nil {
		err = errIncomplete
	}
	if !g.started {
		// Garbage, an error object or an empty body where the answer
		// should start: nothing was generated, another backend may serve.
		return engine.Result{}, unavailable(g.op, "%v", err)
	}
	return engine.Result{}, engine.Public(fmt.Errorf("ollama: %s: the answer is cut short after %d bytes of text: %w", g.op, g.text.Len(), err),
		fmt.Sprintf("the backend's answer broke off after %d bytes of text: the answer is cut short (the gateway's log has the details under this request's X-Request-Id)", g.text.Len()))
}

// finishReason maps Ollama's done_reason.
func finishReason(reason string) string {
	if reason == "length" {
		return engine.FinishLength
	}
	return engine.FinishStop // "stop", and "" from a server that says nothing
}

// isTimeout reports whether a transport error is a timeout of its own (a
// connect that did not complete in Config.ConnectTimeout), not a refusal.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
