package ollama

import (
	"encoding/json"
	"maps"
	"math/bits"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
)

// checkForm checks what makes a request sendable to Ollama at all: one
// prompt form, and not token ids, which Ollama's API has no field for.
func checkForm(req engine.Request) error {
	forms := 0
	for _, set := range []bool{len(req.Messages) > 0, req.Prompt != "", len(req.Tokens) > 0} {
		if set {
			forms++
		}
	}
	switch {
	case forms != 1:
		return engine.Invalid("exactly one of messages, prompt and tokens must be given")
	case len(req.Tokens) > 0:
		return engine.Invalid("a prompt of token ids cannot be sent to Ollama (its API takes text); send messages or a text prompt")
	}
	for i, m := range req.Messages {
		if !engine.ValidRole(m.Role) {
			return engine.Invalid("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	return nil
}

// checkRequest checks req against what Ollama can do and a model of
// context limit tokens.
func checkRequest(req engine.Request, limit int) error {
	if err := checkForm(req); err != nil {
		return err
	}
	switch {
	case req.MaxTokens < 0 || req.MaxTokens > limit:
		return engine.Invalid("max tokens %d outside 0..%d (the context of one slot)", req.MaxTokens, limit)
	case req.Keep < -1:
		return engine.Invalid("keep %d below -1 (-1 keeps the whole prompt)", req.Keep)
	case req.Slot < -1:
		return engine.Invalid("slot %d below -1 (-1 lets the backend choose)", req.Slot)
	case req.IgnoreEOS:
		// Ollama has no ignore_eos: an answer of the asked length cannot be
		// promised, and a benchmark that needs one would measure the wrong
		// thing without noticing.
		return engine.Invalid("Ollama cannot generate past the end of generation (ignore_eos)")
	case req.NoCache:
		// Ollama v0.9.6 always reuses its cache; a "cold" measurement
		// through it would be warm.
		return engine.Invalid("Ollama cannot be told not to reuse its prompt cache")
	case req.Sampling.Output != nil && (req.Sampling.Output.Prefix != "" || req.Sampling.Output.Suffix != ""):
		// Ollama constrains a whole answer to a schema, never a JSON value
		// inside fixed text: a required tool call would be unconstrained.
		return engine.Invalid("an Ollama backend cannot constrain a required tool call (use tool_choice auto)")
	case req.Sampling.Grammar != "" || len(req.Sampling.LogitBias) > 0:
		return engine.Invalid("an Ollama backend takes neither a grammar nor logit_bias")
	}
	return nil
}

// plan is what kvwin sends for one request, and what it estimated on the way.
type plan struct {
	text   string // the canonical rendering (PromptText)
	upper  int    // bound on the prompt's tokens
	numCtx int
	grew   bool // num_ctx grew past what was sent before: Ollama reloads the model
}

// size decides num_ctx for a prompt of at most upper tokens (see the package
// comment): Config.ContextLength if pinned; else the next power of two
// holding the prompt and the answer, at least Config.MinContext and never
// less than what was sent before, so that a short request does not make
// Ollama reload the model and drop a long conversation's KV. Both are
// capped by the model's context.
func (b *Backend) size(req engine.Request, upper, modelCtx int) (numCtx int, grew bool) {
	if b.cfg.ContextLength > 0 {
		return min(b.cfg.ContextLength, modelCtx), false
	}
	answer := req.MaxTokens
	if answer == 0 {
		answer = b.cfg.AnswerTokens
	}
	n := min(max(b.cfg.MinContext, ceilPow2(upper+answer)), modelCtx)
	for {
		high := b.ctxHigh.Load()
		if int64(n) <= high {
			// Capped again: the model may have been re-created with a
			// smaller context since.
			return min(int(high), modelCtx), false
		}
		if b.ctxHigh.CompareAndSwap(high, int64(n)) {
			return n, high != 0
		}
	}
}

// ceilPow2 is the smallest power of two at least n (1 for n < 1), or n
// itself past 2^30, where no model's context reaches.
func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	if n > 1<<30 {
		return n
	}
	return 1 << bits.Len(uint(n-1))
}

// options are the Ollama options of req: Config.Options, then what kvwin
// manages. Every managed option is always sent, because the model's
// Modelfile parameters apply to whatever is not, and kvwin's request must
// mean the same on every backend. stop is the exception: sent only when
// the request has stop strings, since an empty list would erase the
// Modelfile's stop strings, which many templates need to end a turn.
func (b *Backend) options(req engine.Request, p plan) map[string]any {
	opts := make(map[string]any, len(b.cfg.Options)+len(managedOptions))
	maps.Copy(opts, b.cfg.Options)

	predict := b.predict(req, p)
	keep := req.Keep
	if keep == 0 {
		keep = max(systemTokens(req), defaultNumKeep)
	}
	seed := int64(req.Sampling.Seed)
	if req.Sampling.Seed == 0xFFFFFFFF {
		seed = -1 // llama.cpp's "random", in Ollama's spelling
	}
	s := req.Sampling
	opts["num_ctx"] = p.numCtx
	opts["num_keep"] = keep
	opts["num_predict"] = predict
	opts["seed"] = seed
	opts["temperature"] = s.Temperature
	opts["top_k"] = s.TopK
	opts["top_p"] = s.TopP
	opts["min_p"] = s.MinP
	opts["repeat_penalty"] = s.RepeatPenalty
	opts["repeat_last_n"] = s.RepeatLastN
	if s.PresencePenalty != 0 {
		opts["presence_penalty"] = s.PresencePenalty
	}
	if s.FrequencyPenalty != 0 {
		opts["frequency_penalty"] = s.FrequencyPenalty
	}
	if len(req.Stop) > 0 {
		opts["stop"] = req.Stop
	}
	return opts
}

// chatRequest is req (with messages) for POST /api/chat.
func (b *Backend) chatRequest(req engine.Request, p plan) *api.ChatRequest {
	msgs := make([]api.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = api.Message{Role: m.Role, Content: m.Content}
	}
	stream := true
	return &api.ChatRequest{
		Model: b.cfg.Model, Messages: msgs, Stream: &stream, Format: format(req),
		KeepAlive: &api.Duration{Duration: b.cfg.KeepAlive}, Options: b.options(req, p),
	}
}

// generateRequest is req (with a text prompt) for POST /api/generate, raw:
// the prompt is the model's input as it is, without the model's template
// or system prompt, as a text prompt is on every kvwin backend.
func (b *Backend) generateRequest(req engine.Request, p plan) *api.GenerateRequest {
	stream := true
	return &api.GenerateRequest{
		Model: b.cfg.Model, Prompt: req.Prompt, Raw: true, Stream: &stream, Format: format(req),
		KeepAlive: &api.Duration{Duration: b.cfg.KeepAlive}, Options: b.options(req, p),
	}
}

// format is Ollama's format for JSON output: the schema, or "json" for any
// object; nil without.
func format(req engine.Request) json.RawMessage {
	o := req.Sampling.Output
	switch {
	case o == nil:
		return nil
	case len(o.Schema) == 0:
		return json.RawMessage(`"json"`)
	}
	return json.RawMessage(o.Schema)
}

// predict is the num_predict of req: MaxTokens, or "until the context is
// full" without letting Ollama shift the context when it is: the room left
// after the prompt, or the answer reserve if the bound leaves none (Ollama
// truncates then; kvwin's window is meant to prevent that). The answer is
// also cut there by kvwin (stream.go), for a server that goes on.
func (b *Backend) predict(req engine.Request, p plan) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return max(p.numCtx-p.upper, min(b.cfg.AnswerTokens, p.numCtx))
}
