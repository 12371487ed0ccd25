// Package core holds what the server (web) and its dialects (web/openai,
// web/ollama, web/llamaserver) share to serve a turn: the request's Turn,
// the Encoder contract a wire format implements and the Wire it is served
// with, the SSE and NDJSON EventWriter, the one error classification
// (Classify, so HTTP status is decided here) and the error shapes, body
// decoding, and the request parameters more than one dialect reads. It
// imports no other web package.
package core

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/queue"
	"kvwin/engine/wire"
	"kvwin/internal/ident"
)

// Turn is what the server knows of one request as it is served. The first
// middleware (accessLog) makes it when the request arrives, authenticate
// names its tenant, and the handler completes it: the backend serving the
// model it names (selectBackend, once per request) and, for a chat, its
// window and conversation (applyWindow). Each step after the middleware is
// handed it explicitly; it is never shared between requests.
type Turn struct {
	// Start is when the request arrived; Decoded when its body was read
	// and decoded (zero before), the end of its read phase.
	Start   time.Time
	Decoded time.Time
	// RequestID is the request's id (X-Request-Id).
	RequestID string
	// Owner is the tenant the request acts as and the conversation it
	// continues, if it names one; Admin whether it holds the admin key (or
	// no key is configured at all).
	ident.Owner
	Admin bool
	// Class is the request's priority class and Weight its tenant's
	// fair-share weight (0 means 1), from its key and X-Kvwin-Priority
	// (docs/tenants.md, "Priority and fair shares").
	Class  queue.Class
	Weight float64
	// Charge, if set, counts the tokens a generation used (prompt and
	// generated) against its key's tokens per minute.
	Charge func(tokens int)
	// Backend serves the request and Info is what it said of itself when
	// chosen: the server's own backend until selectBackend picks one of a
	// Catalog's.
	Backend engine.Backend
	Info    engine.Info
	// Window is how its chat was windowed (nil without a window).
	Window *WindowLayout
}

// Encoder renders one wire format's objects. A new encoder serves one
// request; it may keep state across calls (counters, the first event).
type Encoder interface {
	// Whole renders the non-streamed answer of a finished generation.
	Whole(res engine.Result) any
	// Open renders the first event (its text, if any, and what the API
	// sends with a first token; see Opener); nil flushes what is out.
	Open(ev engine.Event) []any
	// Text renders streamed text after the first event.
	Text(s string) []any
	// End renders the last objects of a finished stream.
	End(res engine.Result) []any
	// StreamError renders an error that ends a started stream.
	StreamError(err error) any
}

// Opener is an encoder whose API opens a stream with an event of its own
// (Anthropic's message_start, the Responses API's response.created),
// which goes out with the headers as soon as the backend has accepted the
// request, before the first token. Opening renders it; Open then renders
// only what the first event adds. Open without Opening before it (a
// backend that did not say it accepted) renders both.
type Opener interface {
	Opening() []any
}

// KeepAliver is an encoder whose API has its own keep-alive object, sent
// while the stream waits for its first token (Anthropic's ping event,
// Ollama's object with no text); the others' framing sends an SSE comment.
type KeepAliver interface {
	KeepAlive() any
}

// LogprobEncoder is an encoder that streams log-probabilities with the
// text they belong to (OpenAI's); others drop them.
type LogprobEncoder interface {
	TextLogprobs(s string, lps []engine.TokenLogprob) []any
}

// StreamText renders an event's text, and its log-probabilities where
// the encoder can.
func StreamText(enc Encoder, ev engine.Event) []any {
	if le, ok := enc.(LogprobEncoder); ok && len(ev.Logprobs) > 0 {
		return le.TextLogprobs(ev.Text, ev.Logprobs)
	}
	if ev.Text == "" {
		return nil
	}
	return enc.Text(ev.Text)
}

// Wire is how one request wants its answer: its encoder, whether to
// stream, the stream's framing, and the error answer before anything was
// written (its API's error shape and status).
type Wire struct {
	Enc    Encoder
	Stream bool
	Frame  Framing
	Fail   func(c *gin.Context, err error)
}

// Fail answers err as an OpenAI error, with the status Classify gives it,
// unless the client has gone: then nobody would read it, and nothing is
// written.
func Fail(c *gin.Context, err error) {
	AnswerError(c, err, func(err error) (int, any) {
		status, body := Classify(err)
		return status, ErrorBody{Error: body}
	})
}

// AnswerError records err for the access log and answers it with the status
// and body shape gives it (each API has its own error shape), with
// Retry-After where the status asks for one; nothing is written when the
// client has gone.
func AnswerError(c *gin.Context, err error, shape func(error) (int, any)) {
	if ClientGone(c.Request.Context(), err) {
		_ = c.Error(ErrClientGone)
		return
	}
	_ = c.Error(err)
	status, body := shape(err)
	SetRetryAfter(c.Writer.Header(), status)
	if rl := (*RateLimitError)(nil); errors.As(err, &rl) {
		c.Writer.Header().Set("Retry-After", strconv.Itoa(rl.RetryAfterSeconds()))
	}
	WriteJSON(c.Writer, status, body)
}

// ServedBy names the backend that served a request: the one a router chose,
// or the backend itself.
func ServedBy(info engine.Info, chosen string) string {
	if chosen != "" {
		return chosen
	}
	return info.Name
}

// SetGenerationHeaders sets the X-Kvwin-* headers from a backend's timings.
func SetGenerationHeaders(h http.Header, backend string, t engine.Timings) {
	wire.Generation{
		Backend: backend, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
		CachedEstimated: t.CachedEstimated, PromptMs: float64(t.PromptEval.Microseconds()) / 1000,
	}.Set(h)
}

// WriteJSON writes v as the whole response. HTML escaping is off so that
// generated text such as "<b>" reaches clients as OpenAI sends it.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := EncodeJSON(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"message":"could not encode the response","type":"server_error","code":"internal_error"}}`+"\n")
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client left; nothing to do
}

// EncodeJSON marshals v without HTML escaping, followed by a newline.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// NewID returns a response id: prefix and 26 random base32 characters.
func NewID(prefix string) string {
	return prefix + rand.Text()
}

// SetRetryAfter sets Retry-After on 429 and 503 answers.
func SetRetryAfter(h http.Header, status int) {
	switch status {
	case http.StatusTooManyRequests:
		h.Set("Retry-After", strconv.Itoa(RetryAfterBusy))
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", strconv.Itoa(RetryAfterUnavailable))
	}
}

// MaxConversationBytes bounds a conversation's name (prompt_cache_key or
// X-Conversation-Id): it is stored with every turn, and a name is an id,
// not a document.
const MaxConversationBytes = 512

// ConversationOf is the request's conversation: the X-Conversation-Id
// header, else the body's prompt_cache_key. A name no store can keep
// (CheckName) is a 400 naming the one that was sent.
func ConversationOf(c *gin.Context, promptCacheKey string) (string, error) {
	param, conv := "prompt_cache_key", promptCacheKey
	if h := c.GetHeader(wire.HeaderConversation); h != "" {
		param, conv = wire.HeaderConversation, h
	}
	if err := CheckName(param, conv, MaxConversationBytes); err != nil {
		return "", err
	}
	return conv, nil
}

// FailOllama answers err as Ollama does, {"error": "…"}, with Classify's
// status, unless the client has gone.
func FailOllama(c *gin.Context, err error) {
	AnswerError(c, err, func(err error) (int, any) {
		status, body := Classify(err)
		return status, map[string]string{"error": body.Message}
	})
}

// Retry-After values. A 429 clears when any running request ends, which for
// a short answer is about a second; a 503 means no backend can serve (one is
// down, or the server is shutting down), which health checks (every 2 s)
// and restarts take longer to change.
const (
	RetryAfterBusy        = 1
	RetryAfterUnavailable = 5
)

// WindowLayout is how a chat's window was cut: sink tokens (with their
// padding), kept tokens after them, evicted messages, packet tokens.
type WindowLayout struct {
	Policy        string `json:"policy"`
	Messages      int    `json:"messages"`
	SinkTokens    int    `json:"sink_tokens"`
	KeptTokens    int    `json:"kept_tokens"`
	EvictedTurns  int    `json:"evicted_messages"`
	PacketTokens  int    `json:"packet_tokens"`
	PacketTurns   int    `json:"packet_turns"`
	EvictionSteps int    `json:"eviction_steps"`
}

// IntBytes is b as numbers: OpenAI's bytes field, which encoding/json would
// otherwise write as base64.
func IntBytes(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// OutputTokens is the tokens a result generated: the backend's count, or
// the ids it returned if it did not count them. Every usage a dialect
// reports, and the turn's span, says this number.
func OutputTokens(res engine.Result) int {
	if res.Timings.GeneratedTokens > 0 {
		return res.Timings.GeneratedTokens
	}
	return len(res.Tokens)
}

// FinishReason is the result's finish reason; OpenAI clients expect one on
// every finished choice, so a backend that left it empty stopped normally.
func FinishReason(res engine.Result) string {
	if res.FinishReason == "" {
		return engine.FinishStop
	}
	return res.FinishReason
}
