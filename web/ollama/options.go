package ollama

import (
	"bytes"
	"math"

	oapi "github.com/ollama/ollama/api"
	"github.com/ollama/ollama/template"

	"kvwin/engine"
	"kvwin/web/core"
)

// ollamaRequest translates Ollama's options into an engine.Request for the
// backend described by info. The options kvwin acts on are num_predict,
// temperature, top_k, top_p, min_p, seed, stop, repeat_penalty and
// repeat_last_n; num_ctx is accepted within a slot's context (a slot's
// context is fixed when the server starts). Ollama ignores options it does
// not know, and so does kvwin (num_thread, mirostat, …). A value of the
// wrong type or out of range is a 400 naming options.NAME.
//
// Options not given keep the engine's defaults (llama-server's), not
// Ollama's Modelfile defaults, so a request means the same on every route.
func ollamaRequest(opts map[string]any, info engine.Info) (engine.Request, error) {
	o := ollamaOptions(opts)
	p := core.Params{Model: info.Model}
	var err error
	if p.Temperature, err = o.float("temperature"); err != nil {
		return engine.Request{}, err
	}
	if p.TopP, err = o.float("top_p"); err != nil {
		return engine.Request{}, err
	}
	if p.MinP, err = o.float("min_p"); err != nil {
		return engine.Request{}, err
	}
	if p.TopK, err = o.int("top_k"); err != nil {
		return engine.Request{}, err
	}
	seed, err := o.int("seed")
	if err != nil {
		return engine.Request{}, err
	}
	if seed != nil {
		v := int64(*seed)
		p.Seed = &v
	}
	if p.Stop, err = o.strings("stop"); err != nil {
		return engine.Request{}, err
	}
	req, err := p.Request(info)
	if err != nil {
		return req, o.rename(err)
	}

	limit := core.ContextLimit(info)
	if v, err := o.int("num_predict"); err != nil {
		return req, err
	} else if v != nil {
		switch {
		case *v == -1 || *v == -2: // until the model stops, or the context is full: the engine's 0
		case *v < -2 || *v == 0 || *v > limit:
			return req, core.OutOfRange("options.num_predict", *v, -2, limit, " (-1: until the model stops; -2: until the slot is full; not 0)")
		default:
			req.MaxTokens = *v
		}
	}
	if v, err := o.int("num_ctx"); err != nil {
		return req, err
	} else if v != nil && (*v < 1 || *v > limit) {
		return req, core.OutOfRange("options.num_ctx", *v, 1, limit, " (a slot's context is set when kvwin starts: --ctx)")
	}
	if v, err := o.float("repeat_penalty"); err != nil {
		return req, err
	} else if v != nil {
		if *v < 0 || *v > core.MaxRepeatPenalty {
			return req, core.OutOfRange("options.repeat_penalty", *v, 0, core.MaxRepeatPenalty, " (1 disables it)")
		}
		req.Sampling.RepeatPenalty = *v
	}
	if v, err := o.int("repeat_last_n"); err != nil {
		return req, err
	} else if v != nil {
		switch {
		case *v == -1:
			req.Sampling.RepeatLastN = info.ContextSlot
		case *v < -1 || *v > limit:
			return req, core.OutOfRange("options.repeat_last_n", *v, -1, limit, " (-1: the slot's context)")
		default:
			req.Sampling.RepeatLastN = *v
		}
	}
	return req, nil
}

// ollamaOptions reads Ollama's options object, whose values arrive as
// JSON-decoded any.
type ollamaOptions map[string]any

// float returns the number named key, or nil when absent or null.
func (o ollamaOptions) float(key string) (*float32, error) {
	v, ok := o[key]
	if !ok || v == nil {
		return nil, nil
	}
	f, ok := v.(float64)
	if !ok {
		return nil, core.BadInput(core.CodeInvalidType, "options."+key, "options.%s must be a number", key)
	}
	out := float32(f)
	return &out, nil
}

// int returns the integer named key, or nil when absent or null.
func (o ollamaOptions) int(key string) (*int, error) {
	v, ok := o[key]
	if !ok || v == nil {
		return nil, nil
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32*2 {
		return nil, core.BadInput(core.CodeInvalidType, "options."+key, "options.%s must be an integer", key)
	}
	out := int(f)
	return &out, nil
}

// strings returns the strings named key (an array, or one string).
func (o ollamaOptions) strings(key string) ([]string, error) {
	v, ok := o[key]
	if !ok || v == nil {
		return nil, nil
	}
	if s, ok := v.(string); ok {
		return []string{s}, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, core.BadInput(core.CodeInvalidType, "options."+key, "options.%s must be an array of strings", key)
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		if out[i], ok = e.(string); !ok {
			return nil, core.BadInput(core.CodeInvalidType, "options."+key, "options.%s must be an array of strings", key)
		}
	}
	return out, nil
}

// rename puts "options." before the parameter params.request named, since
// an Ollama client sent it inside options.
func (o ollamaOptions) rename(err error) error {
	if in, ok := err.(*core.InputError); ok && in.Param() != "" && in.Param() != "model" {
		return in.Within("options.")
	}
	return err
}

// renderTemplate renders an Ollama Go template (generate's "template")
// over a one-turn chat of system and prompt, as Ollama does, with the
// pinned Ollama module's template package.
func renderTemplate(tmpl, system, prompt string) (string, error) {
	t, err := template.Parse(tmpl)
	if err != nil {
		return "", core.BadInput(core.CodeInvalidValue, "template", "template does not parse: %v", err)
	}
	var msgs []oapi.Message
	if system != "" {
		msgs = append(msgs, oapi.Message{Role: engine.RoleSystem, Content: system})
	}
	msgs = append(msgs, oapi.Message{Role: engine.RoleUser, Content: prompt})
	var b bytes.Buffer
	if err := t.Execute(&b, template.Values{Messages: msgs}); err != nil {
		return "", core.BadInput(core.CodeInvalidValue, "template", "template does not render: %v", err)
	}
	if b.Len() == 0 {
		return "", core.BadInput(core.CodeInvalidValue, "template", "template renders to nothing")
	}
	return b.String(), nil
}
