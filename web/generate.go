package web

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
)

// Response headers every generation carries, streamed or not (DESIGN.md);
// their names and formats live in package wire.
const (
	HeaderBackend         = wire.HeaderBackend
	HeaderPromptTokens    = wire.HeaderPromptTokens
	HeaderCachedTokens    = wire.HeaderCachedTokens
	HeaderCachedEstimated = wire.HeaderCachedEstimated
	HeaderPromptMs        = wire.HeaderPromptMs
)

// format renders the response objects of one endpoint. Chat and legacy
// completions run the same generation flow and differ only here.
type format interface {
	// complete renders the non-streamed response of a finished generation.
	complete(m meta, res engine.Result) any
	// chunk renders one streamed chunk, or returns nil when the endpoint
	// has no chunk of that kind.
	chunk(m meta, p part) any
}

// meta is what every object of one response repeats.
type meta struct {
	id      string
	created int64
	model   string
}

// part says which streamed chunk to render: exactly one field is set.
type part struct {
	open bool   // the opening chunk, sent with the headers
	text string // generated text
	// logprobs are those of the tokens since the last chunk, with text
	// or alone, when the request asked for them.
	logprobs []engine.TokenLogprob
	finish   string // the finish reason, in the last choice chunk
	usage    *usage // the usage chunk, after the last choice chunk
}

// reply is how one request wants its answer.
type reply struct {
	meta         meta
	stream       bool
	includeUsage bool
	format       format
}

// meta starts the metadata of a new response.
func (s *Server) meta(prefix string, info engine.Info) meta {
	return meta{id: s.newID(prefix), created: s.now().Unix(), model: info.Model}
}

// generate runs req on the backend and answers in OpenAI's format, as r
// asks (see turn). It blocks until the generation ends.
func (s *Server) generate(c *gin.Context, t *Turn, req engine.Request, r reply) {
	s.turn(c, t, req, wireFormat{enc: openAIEncoder{r}, stream: r.stream, frame: frameOpenAI, fail: s.fail})
}

// openAIEncoder renders chat and legacy completions through their format:
// the opening chunk (chat's role), text chunks, the finish chunk, the
// usage chunk when asked for, and OpenAI's error object in the stream.
type openAIEncoder struct{ r reply }

var _ encoder = openAIEncoder{}

func (e openAIEncoder) whole(res engine.Result) any { return e.r.format.complete(e.r.meta, res) }

func (e openAIEncoder) open(ev engine.Event) []any {
	var out []any
	if ch := e.r.format.chunk(e.r.meta, part{open: true}); ch != nil {
		out = append(out, ch)
	}
	if ev.Text != "" || len(ev.Logprobs) > 0 {
		out = append(out, e.textLogprobs(ev.Text, ev.Logprobs)...)
	}
	return out
}

func (e openAIEncoder) text(s string) []any { return e.textLogprobs(s, nil) }

func (e openAIEncoder) textLogprobs(s string, lps []engine.TokenLogprob) []any {
	if ch := e.r.format.chunk(e.r.meta, part{text: s, logprobs: lps}); ch != nil {
		return []any{ch}
	}
	return nil
}

func (e openAIEncoder) end(res engine.Result) []any {
	out := []any{e.r.format.chunk(e.r.meta, part{finish: finishReason(res)})}
	if e.r.includeUsage {
		u := usageOf(res)
		out = append(out, e.r.format.chunk(e.r.meta, part{usage: &u}))
	}
	return out
}

func (e openAIEncoder) streamError(err error) any {
	_, body := classify(err)
	return errorBody{Error: body}
}

// fail answers err as an OpenAI error, with the status classify gives it,
// unless the client has gone: then nobody would read it, and nothing is
// written.
func (s *Server) fail(c *gin.Context, err error) {
	answerError(c, err, func(err error) (int, any) {
		status, body := classify(err)
		return status, errorBody{Error: body}
	})
}

// answerError records err for the access log and answers it with the status
// and body shape gives it (each API has its own error shape), with
// Retry-After where the status asks for one; nothing is written when the
// client has gone.
func answerError(c *gin.Context, err error, shape func(error) (int, any)) {
	if clientGone(c.Request.Context(), err) {
		_ = c.Error(errClientGone)
		return
	}
	_ = c.Error(err)
	status, body := shape(err)
	setRetryAfter(c.Writer.Header(), status)
	writeJSON(c.Writer, status, body)
}

// servedBy names the backend that served a request: the one a router chose,
// or the backend itself.
func servedBy(info engine.Info, chosen string) string {
	if chosen != "" {
		return chosen
	}
	return info.Name
}

// setGenerationHeaders sets the X-Kvwin-* headers from a backend's timings.
func setGenerationHeaders(h http.Header, backend string, t engine.Timings) {
	wire.Generation{
		Backend: backend, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
		CachedEstimated: t.CachedEstimated, PromptMs: float64(t.PromptEval.Microseconds()) / 1000,
	}.Set(h)
}

// usageOf is the OpenAI usage of a finished generation.
func usageOf(res engine.Result) usage {
	t := res.Timings
	completion := t.GeneratedTokens
	if completion == 0 {
		completion = len(res.Tokens) // a backend that did not count them
	}
	return usage{
		PromptTokens:        t.PromptTokens,
		CompletionTokens:    completion,
		TotalTokens:         t.PromptTokens + completion,
		PromptTokensDetails: promptTokensDetails{CachedTokens: t.CachedTokens},
	}
}

// finishReason is the result's finish reason; OpenAI clients expect one on
// every finished choice, so a backend that left it empty stopped normally.
func finishReason(res engine.Result) string {
	if res.FinishReason == "" {
		return engine.FinishStop
	}
	return res.FinishReason
}

// writeJSON writes v as the whole response. HTML escaping is off so that
// generated text such as "<b>" reaches clients as OpenAI sends it.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encodeJSON(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"message":"could not encode the response","type":"server_error","code":"internal_error"}}`+"\n")
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client left; nothing to do
}

// encodeJSON marshals v without HTML escaping, followed by a newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// newID returns a response id: prefix and 26 random base32 characters.
func newID(prefix string) string {
	return prefix + rand.Text()
}
