package ttft

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"kvwin/cmd/kvwin/bench/chat"
	"kvwin/engine/wire"
)

// ErrPolicyIgnored is returned when a response shows that the server did
// not apply the requested window policy: no X-Kvwin-Window header on a
// cutting policy, or a header naming another policy. Measuring on would
// label full's numbers with another policy's name.
var ErrPolicyIgnored = errors.New("ttft: the server did not apply the requested window policy")

// RejectedError is a turn the server answered with an error status.
type RejectedError struct {
	Policy  Policy
	Turn    int
	Status  int
	Code    string // the OpenAI error code, if the body had one
	Message string // the OpenAI error message, or the start of the body
}

func (e *RejectedError) Error() string {
	msg := fmt.Sprintf("ttft: policy %s: the server rejected turn %d with %d %s", e.Policy, e.Turn, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Turn == 1 && e.Policy.Cuts() && e.Status == http.StatusBadRequest {
		msg += fmt.Sprintf("; does the server have the window layer? (X-Kvwin-Window-Policy: %s)", e.Policy.Window())
	}
	return msg
}

// chatBody is the request body of one turn: a streamed chat completion as
// OpenAI clients send it, plus llama-server's ignore_eos and cache_prompt.
type chatBody struct {
	Messages    []Message `json:"messages"`
	Stream      bool      `json:"stream"`
	MaxTokens   int       `json:"max_tokens"`
	Temperature float64   `json:"temperature"`
	// IgnoreEOS makes every turn generate MaxTokens tokens, so decode time
	// does not vary with what the model happens to say.
	IgnoreEOS   bool `json:"ignore_eos"`
	CachePrompt bool `json:"cache_prompt"`
	// PromptCacheKey names the conversation (Runner.Conversation).
	PromptCacheKey string `json:"prompt_cache_key,omitempty"`
}

// exchange is what one turn's request observed.
type exchange struct {
	ttft     time.Duration
	prompt   int
	cached   int
	promptMs float64
	window   WindowState
	phases   map[string]float64 // Server-Timing, by phase (nil without)
	bytes    int                // the request body's
	// Of a response (RunResponses): its id and the text it streamed.
	id, text string
}

// send posts one turn and reads its stream to the end.
//
// TTFT is measured from just before the request is written to the first
// SSE "data:" event, whatever it carries. kvwin (like llama-server) sends
// its first chunk, the one with the assistant role, only when the backend
// has produced the first token (before it, once the request is accepted,
// only SSE comments: keep-alives), so that event marks the first token; it is
// preferred over the first chunk with content because a byte-level model
// may hold back the first token's bytes until they form valid UTF-8.
// result is turn's row from its exchange, with the tokens of its history;
// lastStep is the highest eviction step seen before it, raised to this
// turn's.
func (ex exchange) result(turn, history int, lastStep *int) TurnResult {
	tr := TurnResult{
		Turn: turn, HistoryTokens: history,
		PromptTokens: ex.prompt, CachedTokens: ex.cached, NewTokens: ex.prompt - ex.cached,
		TTFTMs: millis(ex.ttft), PromptMs: ex.promptMs, RequestBytes: ex.bytes,
		Step: ex.window.Step, Evicted: ex.window.Step > *lastStep, Phases: ex.phases,
	}
	*lastStep = max(*lastStep, ex.window.Step)
	return tr
}

// (Servers that send the role chunk before prefill would be measured short.)
func send(ctx context.Context, hc *http.Client, url string, p Policy, body any, turn int) (exchange, error) {
	return sendWith(ctx, hc, url, p, body, turn, func(r io.Reader, start time.Time, _ *exchange) (time.Duration, error) { return readStream(r, start) })
}

// sendWith is send with read reading the stream (which may note what it
// read in the exchange).
func sendWith(ctx context.Context, hc *http.Client, url string, p Policy, body any, turn int,
	read func(r io.Reader, start time.Time, ex *exchange) (time.Duration, error)) (exchange, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return exchange{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	h.Set(headerPolicy, p.Window())
	resp, start, err := chat.Post(ctx, hc, url, h, b)
	if err != nil {
		return exchange{}, fmt.Errorf("ttft: policy %s turn %d: %w", p, turn, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return exchange{}, rejected(resp, p, turn)
	}
	ex := exchange{window: ParseWindowState(resp.Header.Get(headerWindow))}
	if err := checkPolicy(p, ex.window); err != nil {
		return exchange{}, fmt.Errorf("%w: policy %s, turn %d: %s", ErrPolicyIgnored, p, turn, err)
	}
	ex.bytes = len(b)
	if ex.ttft, err = read(resp.Body, start, &ex); err != nil {
		return exchange{}, fmt.Errorf("ttft: policy %s turn %d: %w", p, turn, err)
	}
	// A stream's generation values and Server-Timing (its phases up to
	// the first token) are its trailers, there once its body is read to
	// the end.
	_, _ = io.Copy(io.Discard, resp.Body)
	g := wire.GenerationOf(resp)
	if v := cmp.Or(resp.Trailer.Get("Server-Timing"), resp.Header.Get("Server-Timing")); v != "" {
		ex.phases = chat.ServerTiming(v)
	}
	ex.prompt, ex.cached, ex.promptMs = g.PromptTokens, g.CachedTokens, g.PromptMs
	return ex, nil
}

// checkPolicy says why a response shows the policy was not applied, or
// returns nil. Under full an absent header is fine: a server without the
// window layer sends everything, which is what full means.
func checkPolicy(p Policy, w WindowState) error {
	switch {
	case !w.Present && p.Cuts():
		return fmt.Errorf("asked for %q, but the response has no %s header (does the server have the window layer?)", p.Window(), headerWindow)
	case w.Present && w.Policy != "" && w.Policy != p.Window():
		return fmt.Errorf("asked for %q, the server applied %q", p.Window(), w.Policy)
	}
	return nil
}

// readStream reads SSE events to the end of the stream and returns the
// time from start to the first data event. An in-stream error object, or a
// stream that ends without [DONE], is an error.
func readStream(r io.Reader, start time.Time) (time.Duration, error) {
	st, err := chat.ReadStream(r, start)
	switch {
	case err != nil:
		return 0, fmt.Errorf("read stream: %w", err)
	case !st.Done:
		return 0, errors.New("the stream ended without [DONE]")
	}
	return st.TTFT, nil
}

// rejected reads an error response into a RejectedError.
func rejected(resp *http.Response, p Policy, turn int) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &RejectedError{Policy: p, Turn: turn, Status: resp.StatusCode}
	var oe struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"` // OpenAI sends a string; some servers a number
		} `json:"error"`
	}
	if json.Unmarshal(body, &oe) == nil && oe.Error.Message != "" {
		e.Message = oe.Error.Message
		if oe.Error.Code != nil {
			e.Code = fmt.Sprint(oe.Error.Code)
		}
	} else {
		e.Message = truncate(strings.TrimSpace(string(body)), 200)
	}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
