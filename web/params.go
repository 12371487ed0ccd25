package web

import (
	"fmt"
	"math"
	"strconv"

	"kvwin/engine"
)

// Ranges of the numeric request parameters (README, "Request parameters").
// A value outside its range is a 400 naming the parameter, checked before
// anything is allocated for it: a huge repeat_last_n once made the engine
// allocate gigabytes. Parameters bounded by the context are bounded by a
// slot's context; before a gateway knows its backends', by maxContext.
const (
	maxTemperature   = 2 // OpenAI's range
	maxTopK          = 1 << 20
	maxRepeatPenalty = 10
	maxContext       = 1 << 20
)

// contextLimit is the bound of the parameters counted in tokens of a slot.
func contextLimit(info engine.Info) int {
	if info.ContextSlot > 0 {
		return info.ContextSlot
	}
	return maxContext
}

// outOfRange is the 400 of a parameter outside [lo, hi].
func outOfRange[T int | int64 | float32](name string, v, lo, hi T, why string) error {
	return badInput(CodeInvalidValue, name, "%s must be in [%v, %v]%s, not %v", name, lo, hi, why, v)
}

// request translates the parameters chat and completions share into an
// engine.Request for the backend described by info. The caller fills in
// the prompt (Messages, Prompt or Tokens).
//
// Only the shape and range of the values is checked here; whether the
// prompt fits, and everything else about serving it, is the backend's call.
func (p *params) request(info engine.Info) (engine.Request, error) {
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
		return req, badInput(CodeInvalidValue, "n", "n must be 1, not %d: kvwin generates one choice per request", *p.N)
	}

	// max_completion_tokens replaced max_tokens in OpenAI's API; when a
	// client sends both, the newer one wins.
	limit, name := p.MaxCompletionTokens, "max_completion_tokens"
	if limit == nil {
		limit, name = p.MaxTokens, "max_tokens"
	}
	if limit != nil {
		if *limit <= 0 {
			return req, badInput(CodeInvalidValue, name, "%s must be positive, not %d", name, *limit)
		}
		if ctx := contextLimit(info); *limit > ctx {
			return req, badInput(CodeInvalidValue, name, "%s is %d but a slot of this model holds %d tokens", name, *limit, ctx)
		}
		req.MaxTokens = *limit
	}

	s := &req.Sampling
	if v := p.Temperature; v != nil {
		if *v < 0 || *v > maxTemperature {
			return req, outOfRange("temperature", *v, 0, maxTemperature, "")
		}
		s.Temperature = *v
	}
	if v := p.TopP; v != nil {
		if *v < 0 || *v > 1 {
			return req, badInput(CodeInvalidValue, "top_p", "top_p must be in [0, 1], not %g", *v)
		}
		s.TopP = *v
	}
	if v := p.TopK; v != nil {
		if *v < 0 || *v > maxTopK {
			return req, outOfRange("top_k", *v, 0, maxTopK, " (0 disables it)")
		}
		s.TopK = *v
	}
	if v := p.MinP; v != nil {
		if *v < 0 || *v > 1 {
			return req, badInput(CodeInvalidValue, "min_p", "min_p must be in [0, 1], not %g", *v)
		}
		s.MinP = *v
	}
	if v := p.Seed; v != nil {
		// -1 is llama-server's "random seed", which the engine spells as
		// the all-ones uint32 of DefaultSampling.
		switch {
		case *v == -1:
		case *v < 0 || *v > math.MaxUint32:
			return req, badInput(CodeInvalidValue, "seed", "seed must be -1 (random) or in [0, %d], not %d", uint32(math.MaxUint32), *v)
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
			return req, outOfRange(pen.name, *pen.v, -2, 2, "")
		}
		*pen.dst = *pen.v
	}
	if len(p.LogitBias) > 0 {
		s.LogitBias = make(map[int]float32, len(p.LogitBias))
		for key, b := range p.LogitBias {
			tok, err := strconv.Atoi(key)
			if err != nil || tok < 0 {
				return req, badInput(CodeInvalidValue, "logit_bias", "logit_bias keys must be token ids, not %q", key)
			}
			if b < -100 || b > 100 {
				return req, outOfRange(fmt.Sprintf("logit_bias[%q]", key), b, -100, 100, "")
			}
			s.LogitBias[tok] = b
		}
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

// includeUsage reports whether a stream ends with a usage chunk.
func (p *params) includeUsage() bool {
	return p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

// logprobs reads how many alternatives per token a request asks for; top
// without want is OpenAI's 400.
func logprobs(req *engine.Request, want bool, top *int, name string) error {
	if top == nil {
		req.Logprobs = want
		return nil
	}
	if *top < 0 || *top > engine.MaxTopLogprobs {
		return outOfRange(name, *top, 0, engine.MaxTopLogprobs, "")
	}
	if !want {
		return badInput(CodeInvalidValue, name, "%s needs logprobs to be true", name)
	}
	req.Logprobs, req.TopLogprobs = true, *top
	return nil
}
