package ollama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// Ollama's tools and format, served by the machinery of the OpenAI routes
// (web/toolcall): the same tool convention and prompt, the same
// grammar-constrained output. What differs is only the wire:
//
//   - a call comes back as message.tool_calls with its arguments an object
//     (Ollama's api.ToolCall), each call whole in one streamed object, and
//     done_reason stays "stop", as Ollama v0.9.6 answers;
//   - Ollama has no tool_choice: kvwin reads one from options.tool_choice
//     (OpenAI's values: "none", "auto", "required" or
//     {"type": "function", "function": {"name": …}}), since options is the
//     one object every Ollama client passes through as it is;
//   - format "json" is any JSON object, a schema object is a JSON value of
//     that schema (response_format's json_object and json_schema).

// ollamaChatBody is /api/chat's body. The tools are read as OpenAI's tool
// objects, whose parameters keep the client's whole schema (api.Tool's
// fixed struct would drop what it has no field for, such as nested
// properties or maxLength).
type ollamaChatBody struct {
	oapi.ChatRequest
	ToolDefs []toolcall.Tool `json:"tools"`
}

// toolChoiceOption is the options key of kvwin's tool_choice extension.
const toolChoiceOption = "tool_choice"

// ollamaTools checks /api/chat's tools and options.tool_choice.
func ollamaTools(defs []toolcall.Tool, opts map[string]any) (toolcall.Mode, error) {
	for i := range defs {
		if defs[i].Type == "" {
			defs[i].Type = "function" // Ollama does not require it
		}
		defs[i].Function.Parameters = dropNulls(defs[i].Function.Parameters)
	}
	var choice json.RawMessage
	if v, ok := opts[toolChoiceOption]; ok && v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return toolcall.Mode{}, core.BadInput(core.CodeInvalidValue, "options."+toolChoiceOption, "options.%s: %v", toolChoiceOption, err)
		}
		choice = b
	}
	m, err := toolcall.Read(defs, choice)
	if in, ok := err.(*core.InputError); ok && in.Param() == toolcall.ChoiceParam {
		return m, in.Within("options.")
	}
	return m, err
}

// dropNulls removes the null members of a schema's objects: Ollama's Go
// client sends every field of api.Tool's parameters, absent ones as null
// ("required": null), which is no JSON Schema. Values under const, enum,
// default and examples are data and are kept.
func dropNulls(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !bytes.Contains(raw, []byte("null")) {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw // checkSchema names the problem
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, sub := range x {
				switch {
				case k == "const" || k == "enum" || k == "default" || k == "examples":
				case sub == nil:
					delete(x, k)
				default:
					x[k] = walk(sub)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}

// ollamaFormat is the output constraint of a request's format: none when
// absent, null or "", any JSON object for "json", a value of the schema for
// a schema object. Anything else is Ollama's "invalid format" as a 400.
func ollamaFormat(raw json.RawMessage) (*engine.Output, error) {
	f := bytes.TrimSpace(raw)
	switch string(f) {
	case "", "null", `""`:
		return nil, nil
	case `"json"`:
		return &engine.Output{}, nil
	}
	if f[0] != '{' {
		return nil, core.BadInput(core.CodeInvalidValue, "format", `invalid format: %s; expected "json" or a valid JSON Schema object`, f)
	}
	if err := core.CheckSchema(json.RawMessage(f), "format"); err != nil {
		return nil, err
	}
	return &engine.Output{Schema: f}, nil
}

// ollamaHistory is an Ollama history message's calls as toolTurn reads
// them (arguments as JSON text).
func ollamaHistory(calls []oapi.ToolCall) ([]toolcall.Call, error) {
	out := make([]toolcall.Call, len(calls))
	for i, c := range calls {
		args, err := json.Marshal(c.Function.Arguments)
		if err != nil {
			return nil, fmt.Errorf("tool call %d arguments: %w", i, err)
		}
		if c.Function.Arguments == nil {
			args = []byte("{}")
		}
		out[i] = toolcall.Call{Type: "function", Function: toolcall.CallFunction{Name: c.Function.Name, Arguments: string(args)}}
	}
	return out, nil
}

// ollamaCalls reads a parser's calls from the from'th on, up to the last
// one whose arguments are complete (all of them when final): calls whose
// arguments are a JSON object become Ollama's tool calls; any other, and
// an unfinished one at the end, goes back into the content as the model
// wrote it, so no text is lost. It returns the calls, that text, and the
// index to read from next.
func ollamaCalls(p *toolcall.Parser, from int, final bool) ([]oapi.ToolCall, string, int) {
	upTo := len(p.Calls)
	if p.InArgs() && !final {
		upTo-- // its arguments are still coming
	}
	var (
		calls []oapi.ToolCall
		text  strings.Builder
	)
	for i := from; i < upTo; i++ {
		c := p.Calls[i]
		var args oapi.ToolCallFunctionArguments
		if (i < len(p.Calls)-1 || !p.InArgs()) && json.Unmarshal([]byte(c.Function.Arguments), &args) == nil && args != nil {
			calls = append(calls, oapi.ToolCall{Function: oapi.ToolCallFunction{Index: i, Name: c.Function.Name, Arguments: args}})
			continue
		}
		name, _ := json.Marshal(c.Function.Name)
		fmt.Fprintf(&text, "%s{\"name\": %s, \"arguments\": %s", toolcall.CallOpen, name, c.Function.Arguments)
	}
	return calls, text.String(), max(upTo, from)
}
