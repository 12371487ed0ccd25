package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"kvwin/engine"
)

// Ranges of the numeric request parameters (README, "Request parameters").
// A value outside its range is a 400 naming the parameter, checked before
// anything is allocated for it: a huge repeat_last_n once made the engine
// allocate gigabytes. Parameters bounded by the context are bounded by a
// slot's context; before a gateway knows its backends', by maxContext.
const (
	MaxTemperature   = 2 // OpenAI's range
	MaxTopK          = 1 << 20
	MaxRepeatPenalty = 10
	MaxContext       = 1 << 20
)

// ContextLimit is the bound of the parameters counted in tokens of a slot.
func ContextLimit(info engine.Info) int {
	if info.ContextSlot > 0 {
		return info.ContextSlot
	}
	return MaxContext
}

// OutOfRange is the 400 of a parameter outside [lo, hi].
func OutOfRange[T int | int64 | float32](name string, v, lo, hi T, why string) error {
	return BadInput(CodeInvalidValue, name, "%s must be in [%v, %v]%s, not %v", name, lo, hi, why, v)
}

// Request translates the parameters chat and completions share into an
// engine.Request for the backend described by info. The caller fills in
// the prompt (Messages, Prompt or Tokens).
//
// Only the shape and range of the values is checked here; whether the
// prompt fits, and everything else about serving it, is the backend's call.
func (p *Params) Request(info engine.Info) (engine.Request, error) {
	req := engine.Request{Slot: -1, Sampling: engine.DefaultSampling()}

	// An empty model means "whatever this server serves", which is what
	// clients that must send something but do not know the name expect.
	switch p.Model {
	case "", info.Model:
		req.Model = info.Model
	default:
		return req, fmt.Errorf("the model %q does not exist (this server serves %q): %w", p.Model, info.Model, engine.ErrUnknownModel)
	}

	if p.N != nil && *p.N != 1 {
		return req, BadInput(CodeInvalidValue, "n", "n must be 1, not %d: kvwin generates one choice per request", *p.N)
	}

	// max_completion_tokens replaced max_tokens in OpenAI's API; when a
	// client sends both, the newer one wins.
	limit, name := p.MaxCompletionTokens, "max_completion_tokens"
	if limit == nil {
		limit, name = p.MaxTokens, "max_tokens"
	}
	if limit != nil {
		if *limit <= 0 {
			return req, BadInput(CodeInvalidValue, name, "%s must be positive, not %d", name, *limit)
		}
		if ctx := ContextLimit(info); *limit > ctx {
			return req, BadInput(CodeInvalidValue, name, "%s is %d but a slot of this model holds %d tokens", name, *limit, ctx)
		}
		req.MaxTokens = *limit
	}

	s := &req.Sampling
	if err := p.sampling(s); err != nil {
		return req, err
	}

	req.IgnoreEOS = p.IgnoreEOS
	s.Grammar = p.Grammar
	req.NoCache = p.CachePrompt != nil && !*p.CachePrompt

	// An empty stop string cannot mean anything useful, and some engines
	// would match it at once and return nothing; drop it.
	for _, stop := range p.Stop {
		if stop != "" {
			req.Stop = append(req.Stop, stop)
		}
	}
	return req, nil
}

// sampling checks and sets the sampler's parameters: temperature, top_p,
// top_k, min_p, seed, the penalties and logit_bias.
func (p *Params) sampling(s *engine.Sampling) error {
	if v := p.Temperature; v != nil {
		if *v < 0 || *v > MaxTemperature {
			return OutOfRange("temperature", *v, 0, MaxTemperature, "")
		}
		s.Temperature = *v
	}
	if v := p.TopP; v != nil {
		if *v < 0 || *v > 1 {
			return BadInput(CodeInvalidValue, "top_p", "top_p must be in [0, 1], not %g", *v)
		}
		s.TopP = *v
	}
	if v := p.TopK; v != nil {
		if *v < 0 || *v > MaxTopK {
			return OutOfRange("top_k", *v, 0, MaxTopK, " (0 disables it)")
		}
		s.TopK = *v
	}
	if v := p.MinP; v != nil {
		if *v < 0 || *v > 1 {
			return BadInput(CodeInvalidValue, "min_p", "min_p must be in [0, 1], not %g", *v)
		}
		s.MinP = *v
	}
	if v := p.Seed; v != nil {
		// -1 is llama-server's "random seed", which the engine spells as
		// the all-ones uint32 of DefaultSampling.
		switch {
		case *v == -1:
		case *v < 0 || *v > math.MaxUint32:
			return BadInput(CodeInvalidValue, "seed", "seed must be -1 (random) or in [0, %d], not %d", uint32(math.MaxUint32), *v)
		default:
			s.Seed = uint32(*v)
		}
	}

	for _, pen := range []struct {
		name string
		v    *float32
		dst  *float32
	}{{"presence_penalty", p.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty, &s.FrequencyPenalty}} {
		if pen.v == nil {
			continue
		}
		if *pen.v < -2 || *pen.v > 2 {
			return OutOfRange(pen.name, *pen.v, -2, 2, "")
		}
		*pen.dst = *pen.v
	}
	if len(p.LogitBias) > 0 {
		s.LogitBias = make(map[int]float32, len(p.LogitBias))
		for key, b := range p.LogitBias {
			tok, err := strconv.Atoi(key)
			if err != nil || tok < 0 {
				return BadInput(CodeInvalidValue, "logit_bias", "logit_bias keys must be token ids, not %q", key)
			}
			if b < -100 || b > 100 {
				return OutOfRange(fmt.Sprintf("logit_bias[%q]", key), b, -100, 100, "")
			}
			s.LogitBias[tok] = b
		}
	}
	return nil
}

// IncludeUsage reports whether a stream ends with a usage chunk.
func (p *Params) IncludeUsage() bool {
	return p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

// Logprobs reads how many alternatives per token a request asks for; top
// without want is OpenAI's 400.
func Logprobs(req *engine.Request, want bool, top *int, name string) error {
	if top == nil {
		req.Logprobs = want
		return nil
	}
	if *top < 0 || *top > engine.MaxTopLogprobs {
		return OutOfRange(name, *top, 0, engine.MaxTopLogprobs, "")
	}
	if !want {
		return BadInput(CodeInvalidValue, name, "%s needs logprobs to be true", name)
	}
	req.Logprobs, req.TopLogprobs = true, *top
	return nil
}

// Params are the generation parameters chat and legacy completions share.
// Pointers tell "not set" from a zero the client chose.
type Params struct {
	Model               string             `json:"model"`
	Stream              bool               `json:"stream"`
	StreamOptions       *StreamOptions     `json:"stream_options"`
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float32           `json:"temperature"`
	TopP                *float32           `json:"top_p"`
	TopK                *int               `json:"top_k"`        // llama-server extension
	MinP                *float32           `json:"min_p"`        // llama-server extension
	IgnoreEOS           bool               `json:"ignore_eos"`   // llama-server extension
	CachePrompt         *bool              `json:"cache_prompt"` // llama-server extension; false recomputes the whole prompt
	Grammar             string             `json:"grammar"`      // llama-server extension: a GBNF grammar
	Seed                *int64             `json:"seed"`
	Stop                StopList           `json:"stop"`
	N                   *int               `json:"n"`
	PresencePenalty     *float32           `json:"presence_penalty"`
	FrequencyPenalty    *float32           `json:"frequency_penalty"`
	LogitBias           map[string]float32 `json:"logit_bias"`
	// PromptCacheKey names the conversation (see docs/architecture.md, "Conversations and tenants"); the window
	// layer will use it. User is accepted for compatibility only.
	PromptCacheKey string `json:"prompt_cache_key"`
	User           string `json:"user"`
}

type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// StopList is OpenAI's stop field: null, a string, or an array of strings.
type StopList []string

// UnmarshalJSON accepts the three shapes of stop.
func (s *StopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = StopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return BadInput(CodeInvalidType, "stop", "stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// Prompt reads OpenAI's prompt field for one completion: a string, an
// array holding one string, or an array of token ids (which llama-server
// also accepts, and which engine.Request carries as Tokens). Several prompts
// in one request would mean several choices, which kvwin does not generate.
func Prompt(raw json.RawMessage) (string, []int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, BadInput(CodeMissingParameter, "prompt", "prompt is required")
	}
	if ids, ok := tokenArray(raw); ok {
		return "", ids, nil
	}
	var (
		text    string
		texts   []string
		tokens  []int
		invalid = BadInput(CodeInvalidType, "prompt", "prompt must be a string, an array of one string, or an array of token ids")
	)
	switch {
	case raw[0] == '"':
		if json.Unmarshal(raw, &text) != nil {
			return "", nil, invalid
		}
	case json.Unmarshal(raw, &texts) == nil:
		if len(texts) == 0 {
			return "", nil, BadInput(CodeMissingParameter, "prompt", "prompt must not be empty")
		}
		if len(texts) != 1 {
			return "", nil, BadInput(CodeInvalidValue, "prompt", "prompt holds %d strings; kvwin completes exactly one per request", len(texts))
		}
		text = texts[0]
	case json.Unmarshal(raw, &tokens) == nil:
		if len(tokens) == 0 {
			return "", nil, BadInput(CodeMissingParameter, "prompt", "prompt must not be empty")
		}
		return "", tokens, nil
	default:
		return "", nil, invalid
	}
	if text == "" {
		return "", nil, BadInput(CodeMissingParameter, "prompt", "prompt must not be empty")
	}
	return text, nil, nil
}

// unsupportedKeywords are JSON Schema keywords llama.cpp's converter does
// not enforce; a schema using them would be silently loosened, so it is a
// 400 instead.
var unsupportedKeywords = []string{"not", "if", "then", "else", "patternProperties", "dependentRequired",
	"dependentSchemas", "uniqueItems", "contains", "propertyNames", "unevaluatedProperties", "multipleOf"}

// CheckSchema rejects a schema that is not an object or uses what the
// grammar converter cannot enforce, naming it: the check of a schema the
// answer is constrained by.
func CheckSchema(raw json.RawMessage, param string) error {
	v, err := schemaObject(raw, param)
	if err != nil {
		return err
	}
	return walkSchema(v, param)
}

// CheckSchemaObject rejects a schema that is not a JSON object, and asks
// nothing of its keywords: the check of a schema the model only reads (a
// tool's parameters while tool_choice leaves calling to the model), which
// no grammar enforces. Agents' tools use keywords the converter lacks
// (Claude Code's propertyNames); refusing them would refuse the agent.
func CheckSchemaObject(raw json.RawMessage, param string) error {
	_, err := schemaObject(raw, param)
	return err
}

func schemaObject(raw json.RawMessage, param string) (map[string]any, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, BadInput(CodeInvalidValue, param, "%s is not valid JSON", param)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, BadInput(CodeInvalidValue, param, "%s must be a JSON Schema object", param)
	}
	return obj, nil
}

func walkSchema(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range unsupportedKeywords {
			if _, ok := x[k]; ok {
				return BadInput(CodeInvalidValue, at, "%s uses %q, which kvwin's grammar-constrained decoding does not support", at, k)
			}
		}
		if ref, ok := x["$ref"].(string); ok && !strings.HasPrefix(ref, "#") {
			return BadInput(CodeInvalidValue, at, "%s has $ref %q; only local references (#/…) are supported", at, ref)
		}
		for k, sub := range x {
			switch k {
			case "enum", "const", "default", "examples":
				continue
			case "properties", "$defs", "definitions":
				// Names here are the user's, not keywords.
				if named, ok := sub.(map[string]any); ok {
					for name, s := range named {
						if err := walkSchema(s, at+"."+k+"."+name); err != nil {
							return err
						}
					}
					continue
				}
			}
			if err := walkSchema(sub, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		for i, sub := range x {
			if err := walkSchema(sub, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// MaxEmbedInputs bounds the inputs of one embeddings request, as OpenAI's
// API does.
const MaxEmbedInputs = 2048

// EmbedInputs reads input: a non-empty string or array of non-empty
// strings.
func EmbedInputs(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, BadInput(CodeMissingParameter, "input", "input is required")
	}
	var inputs []string
	if raw[0] == '"' {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, BadInput(CodeInvalidType, "input", "input is not a valid string")
		}
		inputs = []string{one}
	} else if err := json.Unmarshal(raw, &inputs); err != nil {
		return nil, BadInput(CodeInvalidType, "input", "input must be a string or an array of strings (token-id inputs are not supported)")
	}
	if len(inputs) == 0 || len(inputs) > MaxEmbedInputs {
		return nil, BadInput(CodeInvalidValue, "input", "input must hold 1 to %d strings, not %d", MaxEmbedInputs, len(inputs))
	}
	for i, in := range inputs {
		if in == "" {
			return nil, BadInput(CodeInvalidValue, "input", "input[%d] is empty", i)
		}
	}
	return inputs, nil
}
