package openai

import (
	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
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

// reply is the answer a request with parameters p wants, rendered by f:
// a new response of id prefix from info's model, streamed (and with the
// usage chunk) as p says.
func (s *server) reply(prefix string, info engine.Info, p *core.Params, f format) reply {
	return reply{
		meta:         meta{id: s.NewID(prefix), created: s.Now().Unix(), model: info.Model},
		stream:       p.Stream,
		includeUsage: p.IncludeUsage(),
		format:       f,
	}
}

// generate runs req on the backend and answers in OpenAI's format, as r
// asks (see turn). It blocks until the generation ends.
func (s *server) generate(c *gin.Context, t *core.Turn, req engine.Request, r reply) {
	s.RunTurn(c, t, req, core.Wire{Enc: openAIEncoder{r}, Stream: r.stream, Frame: core.FrameOpenAI, Fail: core.Fail})
}

// openAIEncoder renders chat and legacy completions through their format:
// the opening chunk (chat's role), text chunks, the finish chunk, the
// usage chunk when asked for, and OpenAI's error object in the stream.
type openAIEncoder struct{ r reply }

var _ core.Encoder = openAIEncoder{}

func (e openAIEncoder) Whole(res engine.Result) any { return e.r.format.complete(e.r.meta, res) }

func (e openAIEncoder) Open(ev engine.Event) []any {
	var out []any
	if ch := e.r.format.chunk(e.r.meta, part{open: true}); ch != nil {
		out = append(out, ch)
	}
	if ev.Text != "" || len(ev.Logprobs) > 0 {
		out = append(out, e.TextLogprobs(ev.Text, ev.Logprobs)...)
	}
	return out
}

func (e openAIEncoder) Text(s string) []any { return e.TextLogprobs(s, nil) }

func (e openAIEncoder) TextLogprobs(s string, lps []engine.TokenLogprob) []any {
	if ch := e.r.format.chunk(e.r.meta, part{text: s, logprobs: lps}); ch != nil {
		return []any{ch}
	}
	return nil
}

func (e openAIEncoder) End(res engine.Result) []any {
	out := []any{e.r.format.chunk(e.r.meta, part{finish: core.FinishReason(res)})}
	if e.r.includeUsage {
		u := usageOf(res)
		out = append(out, e.r.format.chunk(e.r.meta, part{usage: &u}))
	}
	return out
}

func (e openAIEncoder) StreamError(err error) any {
	_, body := core.Classify(err)
	return core.ErrorBody{Error: body}
}

// usageOf is the OpenAI usage of a finished generation.
func usageOf(res engine.Result) usage {
	t := res.Timings
	completion := core.OutputTokens(res)
	return usage{
		PromptTokens:        t.PromptTokens,
		CompletionTokens:    completion,
		TotalTokens:         t.PromptTokens + completion,
		PromptTokensDetails: promptTokensDetails{CachedTokens: t.CachedTokens},
	}
}

// open reads a generation request into body, whose sampling parameters are
// p, selects the backend serving p's model and builds the engine request
// from p: the start that chat and legacy completions share.
func (s *server) open(c *gin.Context, t *core.Turn, body any, p *core.Params) (engine.Request, engine.Info, error) {
	if err := s.Decode(c, body); err != nil {
		return engine.Request{}, engine.Info{}, err
	}
	_, info, err := s.SelectBackend(t, p.Model)
	if err != nil {
		return engine.Request{}, info, err
	}
	req, err := p.Request(info)
	return req, info, err
}
