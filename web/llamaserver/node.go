// Package llamaserver serves the node routes: the subset of llama.cpp's
// llama-server API that kvwin's own llama-server adapter
// (engine/llamaserver) uses, with llama-server's field names, so a kvwin
// gateway fronts kvwin nodes exactly as it fronts llama-servers:
//
//	POST /completion   prompt (text or token ids) → text, streamed as llama-server streams it
//	POST /tokenize     {content, add_special, parse_special, with_pieces} → {tokens}
//	POST /detokenize   {tokens} → {content}
//	GET  /slots        [{id, n_ctx, is_processing, n_tokens}]
//	GET  /props        {default_generation_settings: {n_ctx}, total_slots, model_alias, model_path, chat_template}
//	GET  /health       {"status": "ok"} (served by health, shared with everyone)
//
// Errors are llama-server's shape, {"error": {"code": 400, "message", "type"}},
// with its "exceed_context_size_error" (and n_prompt_tokens, n_ctx) for a
// prompt that does not fit, so llama-server clients understand them. The
// status is still core.Classify's.
//
// Abilities beyond engine.Backend are found by type assertion; a backend
// without one answers that route 501, as llama-server does for a disabled
// endpoint.
//
// Each route serves the model it names ("model" in a POST body, ?model= on
// GET /slots and /props; the first configured when absent) through the
// server's SelectBackend, as every other route does.
package llamaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"kvwin/kvcache"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// errNotSupported: the backend lacks the ability a node route needs.
var errNotSupported = engine.ErrNotSupported

// Services is what the node routes need from the server they are
// mounted on (web.Server implements it).
type Services interface {
	core.Services
	// KeysEnabled reports whether the server has keys (so tenants).
	KeysEnabled() bool
}

// server serves the node routes over its Services.
type server struct{ Services }

// routes are the node routes: what Register mounts, and what Speaks
// recognises.
var routes = []struct {
	method, path string
	handler      func(*server) core.Handler
}{
	{http.MethodPost, "/completion", func(s *server) core.Handler { return s.nodeCompletion }},
	{http.MethodPost, "/tokenize", func(s *server) core.Handler { return s.nodeTokenize }},
	{http.MethodPost, "/detokenize", func(s *server) core.Handler { return s.nodeDetokenize }},
	{http.MethodGet, "/slots", func(s *server) core.Handler { return s.nodeSlots }},
	{http.MethodGet, "/props", func(s *server) core.Handler { return s.nodeProps }},
}

// Register mounts the node routes on r, served through svc.
func Register(r gin.IRoutes, svc Services) {
	s := &server{svc}
	handle := s.Bind(Fail)
	for _, rt := range routes {
		r.Handle(rt.method, rt.path, handle(rt.handler(s)))
	}
}

// Speaks reports whether r is for a node route, so errors answered before
// its handler (keys, limits, the browser guards) take llama-server's shape.
func Speaks(r *http.Request) bool {
	for _, rt := range routes {
		if r.URL.Path == rt.path {
			return true
		}
	}
	return false
}

// nodeCompletionRequest is the body of POST /completion: the fields kvwin
// acts on. Pointers tell "not set" (llama-server's default) from a value.
// Other llama-server fields are ignored. n_probs asks for log-probabilities
// (engine.Request.Logprobs, with n_probs alternatives), answered in
// llama-server's completion_probabilities. n_cache_reuse > 0
// allows reuse by shifting (engine.Request.Shift); the engine picks the run
// length itself.
type nodeCompletionRequest struct {
	Prompt        json.RawMessage `json:"prompt"`
	IDSlot        *int            `json:"id_slot"`      // default -1: any slot
	CachePrompt   *bool           `json:"cache_prompt"` // default true
	NKeep         *int            `json:"n_keep"`
	NPredict      *int            `json:"n_predict"` // default -1: no limit
	Temperature   *float32        `json:"temperature"`
	TopK          *int            `json:"top_k"`
	TopP          *float32        `json:"top_p"`
	MinP          *float32        `json:"min_p"`
	RepeatPenalty *float32        `json:"repeat_penalty"`
	RepeatLastN   *int            `json:"repeat_last_n"` // -1: the slot's context
	Seed          *int64          `json:"seed"`
	Stop          core.StopList   `json:"stop"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	Grammar       string          `json:"grammar"`
	// OpenAI's other sampling fields, as llama-server takes them, and
	// constrained output: llama-server's json_schema, or kvwin_output
	// (a schema with fixed text around it) from a kvwin gateway.
	PresencePenalty  *float32        `json:"presence_penalty"`
	FrequencyPenalty *float32        `json:"frequency_penalty"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	JSONSchema       json.RawMessage `json:"json_schema"`
	KvwinOutput      *struct {
		Schema json.RawMessage `json:"schema"`
		Prefix string          `json:"prefix"`
		Suffix string          `json:"suffix"`
	} `json:"kvwin_output"`
	// Model names the model of a server with several (a config with
	// models:); empty is the first. A server of one model serves every
	// name, as llama-server does.
	Model string `json:"model"`
	// KvwinSlotOnly makes id_slot binding as llama-server's is: only that
	// slot's own KV is reused (engine.Request.SlotOnly). A gateway keeping
	// tenants apart on a node that does not sends it; llama-server ignores it.
	KvwinSlotOnly bool `json:"kvwin_slot_only"`
	// NProbs asks for each token's probability and this many
	// alternatives; PostSamplingProbs (the sampler's probabilities, not
	// the model's) is not supported.
	NProbs            *int `json:"n_probs"`
	PostSamplingProbs bool `json:"post_sampling_probs"`
	NCacheReuse       int  `json:"n_cache_reuse"`
	Stream            bool `json:"stream"`
	TimingsPerToken   bool `json:"timings_per_token"`
}

// request translates the body into an engine.Request. The sampling fields
// it shares with OpenAI's are checked by params.request. A text prompt is
// tokenized by the backend with BOS and without parsing control tokens
// (llama-server parses them); token ids are used as they are.
func (b *nodeCompletionRequest) request(info engine.Info) (engine.Request, error) {
	p := core.Params{Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK, MinP: b.MinP, Seed: b.Seed, Stop: b.Stop,
		IgnoreEOS: b.IgnoreEOS, Grammar: b.Grammar, PresencePenalty: b.PresencePenalty, FrequencyPenalty: b.FrequencyPenalty}
	bias, err := nodeLogitBias(b.LogitBias)
	if err != nil {
		return engine.Request{}, err
	}
	p.LogitBias = bias
	req, err := p.Request(info)
	if err != nil {
		return req, err
	}
	switch {
	case b.KvwinOutput != nil:
		req.Sampling.Output = &engine.Output{Schema: b.KvwinOutput.Schema, Prefix: b.KvwinOutput.Prefix, Suffix: b.KvwinOutput.Suffix}
	case len(b.JSONSchema) > 0 && string(b.JSONSchema) != "null":
		req.Sampling.Output = &engine.Output{Schema: b.JSONSchema}
	}
	if o := req.Sampling.Output; o != nil && len(o.Schema) > 0 {
		if err := core.CheckSchema(o.Schema, "json_schema"); err != nil {
			return req, err
		}
	}
	if v := b.NProbs; v != nil && *v != 0 {
		switch {
		case *v < 0 || *v > engine.MaxTopLogprobs:
			return req, core.OutOfRange("n_probs", *v, 0, engine.MaxTopLogprobs, "")
		case b.PostSamplingProbs:
			return req, core.BadInput(core.CodeInvalidValue, "post_sampling_probs",
				"post_sampling_probs is not supported: kvwin reports the probabilities before sampling")
		}
		req.Logprobs, req.TopLogprobs = true, *v
	}
	req.Shift = b.NCacheReuse > 0
	if req.Prompt, req.Tokens, err = core.Prompt(b.Prompt); err != nil {
		return req, err
	}
	if v := b.NPredict; v != nil {
		switch {
		case *v == -1: // until the model stops or the slot is full: the engine's 0
		case *v == 0:
			return req, core.BadInput(core.CodeInvalidValue, "n_predict", "n_predict 0 (evaluate the prompt only) is not supported")
		case *v < -1 || *v > core.ContextLimit(info):
			return req, core.OutOfRange("n_predict", *v, -1, core.ContextLimit(info), " (-1: until the slot is full; at most a slot's context)")
		default:
			req.MaxTokens = *v
		}
	}
	if v := b.IDSlot; v != nil {
		hi := core.MaxContext
		if info.Slots > 0 {
			hi = info.Slots - 1
		}
		if *v < -1 || *v > hi {
			return req, core.OutOfRange("id_slot", *v, -1, hi, " (-1: any slot)")
		}
		req.Slot = *v
	}
	if b.NCacheReuse < 0 || b.NCacheReuse > core.ContextLimit(info) {
		return req, core.OutOfRange("n_cache_reuse", b.NCacheReuse, 0, core.ContextLimit(info), "")
	}
	if v := b.CachePrompt; v != nil {
		req.NoCache = !*v
	}
	if v := b.NKeep; v != nil {
		if *v < -1 || *v > core.ContextLimit(info) {
			return req, core.OutOfRange("n_keep", *v, -1, core.ContextLimit(info), " (-1: the whole prompt)")
		}
		req.Keep = *v
	}
	if v := b.RepeatPenalty; v != nil {
		if *v < 0 || *v > core.MaxRepeatPenalty {
			return req, core.OutOfRange("repeat_penalty", *v, 0, core.MaxRepeatPenalty, " (1 disables it)")
		}
		req.Sampling.RepeatPenalty = *v
	}
	if v := b.RepeatLastN; v != nil {
		switch {
		case *v == -1:
			req.Sampling.RepeatLastN = info.ContextSlot
		case *v < -1 || *v > core.ContextLimit(info):
			return req, core.OutOfRange("repeat_last_n", *v, -1, core.ContextLimit(info), " (-1: the slot's context)")
		default:
			req.Sampling.RepeatLastN = *v
		}
	}
	return req, nil
}

// DecodeFast decodes a /completion body whose prompt is token ids (what a
// gateway sends, thousands of ids each turn) without encoding/json's
// reflective scan of them, twice (core.DecodeRaw); false, b untouched,
// for anything else. FuzzNodeCompletionDecodeFastAsDecoded holds it to
// encoding/json's result.
func (b *nodeCompletionRequest) DecodeFast(body []byte) bool {
	return core.DecodeRaw(body, b, "prompt", core.IsTokenArray, func(b *nodeCompletionRequest) *json.RawMessage { return &b.Prompt })
}

// nodeCompletion serves POST /completion.
func (s *server) nodeCompletion(c *gin.Context, t *core.Turn) error {
	var body nodeCompletionRequest
	if err := s.open(c, t, &body, &body.Model); err != nil {
		return err
	}
	req, err := body.request(t.Info)
	if err != nil {
		return err
	}
	if t.Conversation, err = core.ConversationOf(c, ""); err != nil {
		return err
	}
	req.SlotOnly = body.KvwinSlotOnly && req.Slot >= 0
	s.RunTurn(c, t, req, core.Wire{Enc: &nodeEncoder{info: t.Info, perToken: body.TimingsPerToken, probs: req.Logprobs}, Stream: body.Stream,
		Frame: core.FrameNode, Fail: Fail})
	return nil
}

// nodeEncoder renders /completion as llama-server does:
//
//	data: {"content": "…", "stop": false, …}\n\n   one partial per event
//	data: {"content": "", "stop": true, "timings": {…}, …}\n\n   the final object
//
// and no [DONE]. The first partial goes out with the backend's first event,
// when prefill ends, with content "" if the event has no text: its arrival
// is the client's time to first token, and with timings_per_token it
// carries the prompt-side timings (how much of the prompt was reused). An
// error after it is llama-server's error object in the stream.
type nodeEncoder struct {
	info     engine.Info
	perToken bool
	probs    bool           // n_probs asked: completion_probabilities with the text
	first    engine.Timings // the first event's: prompt side
	slot     int
	pieces   int       // texts sent; engine events may join tokens, so only close to tokens_predicted
	since    time.Time // the first event, for the per-token timings
}

var (
	_ core.Encoder        = (*nodeEncoder)(nil)
	_ core.LogprobEncoder = (*nodeEncoder)(nil)
)

func (e *nodeEncoder) Whole(res engine.Result) any {
	out := nodeFinal(e.info, res, false)
	if e.probs {
		out.Probs = nodeProbsOf(res.Logprobs)
	}
	return out
}

func (e *nodeEncoder) Open(ev engine.Event) []any {
	e.first, e.slot, e.since = ev.Timings, ev.Slot, time.Now()
	return []any{e.partial(ev.Text, ev.Logprobs)}
}

func (e *nodeEncoder) Text(s string) []any { return []any{e.partial(s, nil)} }

// textLogprobs is a partial with its tokens' probabilities: llama-server
// sends one token's per partial, kvwin those of the tokens since the last
// (text held back for a whole character or a stop string joins them).
func (e *nodeEncoder) TextLogprobs(s string, lps []engine.TokenLogprob) []any {
	return []any{e.partial(s, lps)}
}

func (e *nodeEncoder) End(res engine.Result) []any { return []any{nodeFinal(e.info, res, true)} }

func (e *nodeEncoder) StreamError(err error) any {
	_, body := nodeError(err)
	return nodeErrorEnvelope{Error: body}
}

// partial is one streamed partial carrying text and, when asked for, the
// probabilities of its tokens.
func (e *nodeEncoder) partial(text string, lps []engine.TokenLogprob) nodePartial {
	if text != "" {
		e.pieces++
	}
	ch := nodePartial{Content: text, Tokens: []int{}, IDSlot: e.slot, TokensPredicted: e.pieces, TokensEvaluated: e.first.PromptTokens}
	if e.probs && len(lps) > 0 {
		ch.Probs = nodeProbsOf(lps)
	}
	if e.perToken {
		t := e.first
		t.GeneratedTokens, t.Decode = e.pieces, time.Since(e.since)
		tm := nodeTimingsOf(t)
		ch.Timings = &tm
	}
	return ch
}

// nodePartial is one streamed partial of /completion, as llama-server
// sends it. Tokens is always empty: engine events carry text, not ids (the
// final object has them all).
type nodePartial struct {
	Index           int          `json:"index"`
	Content         string       `json:"content"`
	Tokens          []int        `json:"tokens"`
	Stop            bool         `json:"stop"`
	IDSlot          int          `json:"id_slot"`
	TokensPredicted int          `json:"tokens_predicted"`
	TokensEvaluated int          `json:"tokens_evaluated"`
	Timings         *nodeTimings `json:"timings,omitempty"`
	Probs           []nodeProb   `json:"completion_probabilities,omitempty"`
}

// nodeResult is the final object of /completion: the whole answer, or the
// stream's last object.
type nodeResult struct {
	Index           int         `json:"index"`
	Content         string      `json:"content"`
	Tokens          []int       `json:"tokens"`
	IDSlot          int         `json:"id_slot"`
	Stop            bool        `json:"stop"`
	Model           string      `json:"model"`
	TokensPredicted int         `json:"tokens_predicted"`
	TokensEvaluated int         `json:"tokens_evaluated"`
	HasNewLine      bool        `json:"has_new_line"`
	Truncated       bool        `json:"truncated"`
	StopType        string      `json:"stop_type"`
	StoppingWord    string      `json:"stopping_word"`
	TokensCached    int         `json:"tokens_cached"`
	Timings         nodeTimings `json:"timings"`
	// Probs are every token's, not streamed: a stream's partials carried them.
	Probs []nodeProb `json:"completion_probabilities,omitempty"`
	// KvwinJournal is where the node's slot journal (GET
	// /kvwin/v1/events) stood when the turn ended (engine.Result.Journal;
	// not a llama-server field): a gateway takes no load from an earlier
	// event as the node's load now.
	KvwinJournal *kvcache.Cursor `json:"kvwin_journal,omitempty"`
}

// nodeTimings is llama-server's timings object.
type nodeTimings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// nodeFinal is the final object of res. In a stream its content is empty,
// as llama-server's: the partials carried it.
//
// stop_type is "limit" for a length finish, "word" with stopping_word for
// a stop string (engine.Result.StopSequence), and "eos" for any other.
// truncated is false: the engine never shifts a slot's context, it
// finishes with "length" instead.
// tokens_cached is what llama-server puts there: the tokens the slot holds
// after the request (prompt and generated).
func nodeFinal(info engine.Info, res engine.Result, streamed bool) nodeResult {
	t := res.Timings
	t.GeneratedTokens = core.OutputTokens(res)
	out := nodeResult{
		Content: res.Text, Tokens: res.Tokens, IDSlot: res.Slot, Stop: true, Model: info.Model,
		TokensPredicted: t.GeneratedTokens, TokensEvaluated: t.PromptTokens,
		HasNewLine: strings.Contains(res.Text, "\n"), StopType: "eos",
		TokensCached: t.PromptTokens + t.GeneratedTokens, Timings: nodeTimingsOf(t),
	}
	if streamed {
		out.Content = ""
	}
	if out.Tokens == nil {
		out.Tokens = []int{}
	}
	if j := res.Journal; j.Epoch != "" {
		out.KvwinJournal = &j
	}
	switch {
	case res.FinishReason == engine.FinishLength:
		out.StopType = "limit"
	case res.StopSequence != "":
		out.StopType, out.StoppingWord = "word", res.StopSequence
	}
	return out
}

// nodeTimingsOf maps engine timings to llama-server's: prompt_n counts the
// prompt tokens computed, cache_n those reused. Rates of nothing are 0
// (llama-server divides by zero there).
func nodeTimingsOf(t engine.Timings) nodeTimings {
	promptN := t.PromptTokens - t.CachedTokens
	promptMS, predictedMS := millis(t.PromptEval), millis(t.Decode)
	return nodeTimings{
		CacheN: t.CachedTokens, PromptN: promptN, PromptMS: promptMS,
		PromptPerTokenMS: perToken(promptMS, promptN), PromptPerSecond: perSecond(promptN, promptMS),
		PredictedN: t.GeneratedTokens, PredictedMS: predictedMS,
		PredictedPerTokenMS: perToken(predictedMS, t.GeneratedTokens), PredictedPerSecond: perSecond(t.GeneratedTokens, predictedMS),
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perToken(ms float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return ms / float64(n)
}

func perSecond(n int, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return 1e3 * float64(n) / ms
}

// nodeTokenizeRequest is the body of POST /tokenize.
type nodeTokenizeRequest struct {
	Model        string  `json:"model"` // of a server with several; default the first
	Content      *string `json:"content"`
	AddSpecial   bool    `json:"add_special"`   // default false
	ParseSpecial *bool   `json:"parse_special"` // default true
	WithPieces   bool    `json:"with_pieces"`
}

// nodePiece is a token with its text; Piece is the string, or its bytes
// when they are not valid UTF-8 (part of a character), as llama-server
// sends them.
type nodePiece struct {
	ID    int `json:"id"`
	Piece any `json:"piece"`
}

// open reads the request body into body and records in t the backend
// serving the model it names (*model, read once body is decoded).
func (s *server) open(c *gin.Context, t *core.Turn, body any, model *string) error {
	if err := s.Decode(c, body); err != nil {
		return err
	}
	_, _, err := s.SelectBackend(t, *model)
	return err
}

// tokenizer opens the request as open does and returns the Tokenizer of
// the backend serving it, held (engine.Hold: a catalog's model is loaded)
// until release; route names the route in the error of a backend without
// one.
func (s *server) tokenizer(c *gin.Context, t *core.Turn, body any, model *string, route string) (engine.Tokenizer, func(), error) {
	if err := s.open(c, t, body, model); err != nil {
		return nil, nil, err
	}
	tok, release, err := engine.Hold[engine.Tokenizer](c.Request.Context(), t.Backend)
	if errors.Is(err, engine.ErrNotSupported) {
		return nil, nil, fmt.Errorf("%s: %w", route, errNotSupported)
	}
	if err != nil {
		return nil, nil, err
	}
	return tok, release, nil
}

// nodeTokenize serves POST /tokenize.
func (s *server) nodeTokenize(c *gin.Context, t *core.Turn) error {
	var body nodeTokenizeRequest
	tok, release, err := s.tokenizer(c, t, &body, &body.Model, "tokenize")
	if err != nil {
		return err
	}
	defer release()
	if body.Content == nil {
		return core.BadInput(core.CodeMissingParameter, "content", "content is required")
	}
	ctx := c.Request.Context()
	parse := body.ParseSpecial == nil || *body.ParseSpecial
	ids, err := tokenizeSplit(ctx, t.Backend, tok, *body.Content, body.AddSpecial, parse)
	if err != nil {
		return err
	}
	if !body.WithPieces {
		if ids == nil {
			ids = []int{}
		}
		core.WriteJSON(c.Writer, http.StatusOK, map[string][]int{"tokens": ids})
		return nil
	}
	pieces := make([]nodePiece, len(ids))
	for i, id := range ids {
		text, err := tok.Detokenize(ctx, []int{id})
		if err != nil {
			return err
		}
		pieces[i] = nodePiece{ID: id, Piece: text}
		if !utf8.ValidString(text) {
			b := make([]int, len(text))
			for j := range len(text) {
				b[j] = int(text[j])
			}
			pieces[i].Piece = b
		}
	}
	core.WriteJSON(c.Writer, http.StatusOK, map[string][]nodePiece{"tokens": pieces})
	return nil
}

// tokenizeSplit tokenizes with add_special and parse_special apart. A
// backend with only engine.Tokenizer has one flag for both; what add_special
// adds is what Tokenize("", true) returns (llama.cpp's BOS), so the other
// two cases are composed: BOS + plain tokens, or parsed tokens minus BOS.
func tokenizeSplit(ctx context.Context, b engine.Backend, tok engine.Tokenizer, text string, add, parse bool) ([]int, error) {
	if st, ok := engine.As[engine.SpecialTokenizer](b); ok {
		return st.TokenizeSpecial(ctx, text, add, parse)
	}
	if add == parse {
		return tok.Tokenize(ctx, text, add)
	}
	prefix, err := tok.Tokenize(ctx, "", true)
	if err != nil {
		return nil, err
	}
	if add {
		ids, err := tok.Tokenize(ctx, text, false)
		if err != nil {
			return nil, err
		}
		return append(prefix, ids...), nil
	}
	ids, err := tok.Tokenize(ctx, text, true)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(ids[:min(len(ids), len(prefix))], prefix) {
		return nil, fmt.Errorf("tokenize with parse_special but not add_special: the backend's special tokens %v do not lead %v", prefix, ids)
	}
	return ids[len(prefix):], nil
}

// nodeDetokenize serves POST /detokenize.
func (s *server) nodeDetokenize(c *gin.Context, t *core.Turn) error {
	var body struct {
		Model  string `json:"model"`
		Tokens []int  `json:"tokens"`
	}
	tok, release, err := s.tokenizer(c, t, &body, &body.Model, "detokenize")
	if err != nil {
		return err
	}
	defer release()
	text, err := tok.Detokenize(c.Request.Context(), body.Tokens)
	if err != nil {
		return err
	}
	core.WriteJSON(c.Writer, http.StatusOK, map[string]string{"content": text})
	return nil
}

// slotStates are b's slots, fetched (engine.SlotFetcher) or reported
// (engine.SlotReporter), b held meanwhile (a catalog's model is loaded:
// the route names the model it asks about).
func slotStates(ctx context.Context, b engine.Backend) ([]engine.SlotState, error) {
	if f, release, err := engine.Hold[engine.SlotFetcher](ctx, b); err == nil {
		defer release()
		return f.FetchSlots(ctx)
	} else if !errors.Is(err, engine.ErrNotSupported) {
		return nil, err
	}
	rep, release, err := engine.Hold[engine.SlotReporter](ctx, b)
	if errors.Is(err, engine.ErrNotSupported) {
		return nil, fmt.Errorf("slots: %w", errNotSupported)
	}
	if err != nil {
		return nil, err
	}
	defer release()
	return rep.Slots(), nil
}

// nodeSlots serves GET /slots: engine.SlotState's fields are llama-server's
// names (id, n_ctx, is_processing) plus n_tokens, the tokens a slot's KV
// holds, which llama-server does not report and a kvwin gateway reads.
func (s *server) nodeSlots(c *gin.Context, t *core.Turn) error {
	if _, _, err := s.SelectBackend(t, c.Query("model")); err != nil {
		return err
	}
	states, err := slotStates(c.Request.Context(), t.Backend)
	if err != nil {
		return err
	}
	// A tenant sees only the slots holding its tokens; the admin key
	// naming no tenant (a gateway polling its node), or a server without
	// keys, sees them all.
	all := t.Admin && (!s.KeysEnabled() || c.GetHeader(wire.HeaderTenant) == "")
	slots := []engine.SlotState{}
	for _, sl := range states {
		if all || sl.Tenant == t.Tenant {
			slots = append(slots, sl)
		}
	}
	core.WriteJSON(c.Writer, http.StatusOK, slots)
	return nil
}

// nodeProps is the body of GET /props: llama-server's fields that say what
// the node serves. model_path is the model id (the node does not publish
// its file system); chat_template is empty when the backend cannot tell it.
type nodeProps struct {
	DefaultGenerationSettings struct {
		NCtx int `json:"n_ctx"`
	} `json:"default_generation_settings"`
	TotalSlots   int    `json:"total_slots"`
	ModelAlias   string `json:"model_alias"`
	ModelPath    string `json:"model_path"`
	ChatTemplate string `json:"chat_template"`
	// KvwinSnapshots says the node restores evicted slots from disk (not a
	// llama-server field; a kvwin gateway reads it).
	KvwinSnapshots bool `json:"kvwin_snapshots"`
	// KvwinTenants says the node keeps apart the tenants this caller names
	// (X-Kvwin-Tenant): it has keys and the caller holds the admin key.
	KvwinTenants bool `json:"kvwin_tenants"`
	// KvwinSharesPrefixes says a prefix one slot holds seeds another slot
	// without being computed again (engine.Info.SharesPrefixes), which
	// llama-server's slots cannot do.
	KvwinSharesPrefixes bool `json:"kvwin_shares_prefixes"`
}

// nodeProps serves GET /props.
func (s *server) nodeProps(c *gin.Context, t *core.Turn) error {
	if _, _, err := s.SelectBackend(t, c.Query("model")); err != nil {
		return err
	}
	info := t.Info
	var p nodeProps
	p.DefaultGenerationSettings.NCtx = info.ContextSlot
	p.TotalSlots, p.ModelAlias, p.ModelPath, p.KvwinSnapshots = info.Slots, info.Model, info.Model, info.Snapshots
	p.KvwinTenants = s.KeysEnabled() && t.Admin
	p.KvwinSharesPrefixes = info.SharesPrefixes
	if ct, release, err := engine.Hold[engine.ChatTemplater](c.Request.Context(), t.Backend); err == nil {
		p.ChatTemplate = ct.ChatTemplate()
		release()
	}
	core.WriteJSON(c.Writer, http.StatusOK, p)
	return nil
}

// nodeErrorEnvelope is llama-server's error answer.
type nodeErrorEnvelope struct {
	Error nodeErrorBody `json:"error"`
}

// nodeErrorBody is llama-server's error object: code is the HTTP status.
type nodeErrorBody struct {
	Code          int    `json:"code"`
	Message       string `json:"message"`
	Type          string `json:"type"`
	NPromptTokens int    `json:"n_prompt_tokens,omitempty"`
	NCtx          int    `json:"n_ctx,omitempty"`
}

// Fail answers err in llama-server's shape, unless the client left.
func Fail(c *gin.Context, err error) {
	core.AnswerError(c, err, func(err error) (int, any) {
		status, body := nodeError(err)
		return status, nodeErrorEnvelope{Error: body}
	})
}

// nodeError maps err to a status and llama-server's error object. The
// status is core.Classify's, except for errNotSupported, which only node routes
// have; the type is llama-server's name for the status.
func nodeError(err error) (int, nodeErrorBody) {
	var ctxLen *engine.ContextLengthError
	switch {
	case errors.As(err, &ctxLen):
		// llama-server's words, which clients match on.
		return http.StatusBadRequest, nodeErrorBody{
			Code: http.StatusBadRequest, Type: "exceed_context_size_error",
			Message:       fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", ctxLen.PromptTokens, ctxLen.Limit),
			NPromptTokens: ctxLen.PromptTokens, NCtx: ctxLen.Limit,
		}
	case errors.Is(err, errNotSupported):
		return http.StatusNotImplemented, nodeErrorBody{Code: http.StatusNotImplemented, Message: err.Error(), Type: "not_supported_error"}
	}
	status, api := core.Classify(err)
	return status, nodeErrorBody{Code: status, Message: api.Message, Type: nodeErrorType(status)}
}

// nodeErrorType is llama-server's error type for a status.
func nodeErrorType(status int) string {
	switch {
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable:
		return "unavailable_error"
	case status >= http.StatusInternalServerError:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}
