// Package toolcall is the ChatML tool-call convention (Qwen's and Hermes')
// that the OpenAI, Ollama and Anthropic chats share: reading a request's tools and
// tool_choice, putting them into the prompt or the model's own template,
// constraining a required call by grammar, parsing the calls out of a
// streamed answer (Parser), and remembering the answers that called tools
// as the model wrote them (Answers), so a tool loop stays cached.
package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"kvwin/engine"
	"kvwin/web/core"
)

// Tool calling, the ChatML way (Qwen's and Hermes' convention, which most
// ChatML models are trained on): the tools' definitions go into the system
// message inside <tools></tools>, the model answers a call as
//
//	<tool_call>
//	{"name": "f", "arguments": {…}}
//	</tool_call>
//
// and a tool's result comes back as a user turn inside <tool_response>.
// With tool_choice "required" or a named function the answer is constrained
// by a grammar built from the functions' schemas, so it always parses.

// Tool is one entry of a chat request's tools.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
	// At is where the request holds the function, as its errors name it;
	// zero for a chat request's tools[i].function. The Responses and
	// Messages APIs hold their tools in shapes of their own.
	At Place `json:"-"`
}

// Place names a tool's function and its schema in a request.
type Place struct{ Function, Schema string }

// place is tool i's Place, a chat request's unless At says otherwise.
func (t Tool) place(i int) Place {
	p := t.At
	if p.Function == "" {
		p.Function = fmt.Sprintf("tools[%d].function", i)
	}
	if p.Schema == "" {
		p.Schema = p.Function + ".parameters"
	}
	return p
}

type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Call is an assistant's call, in a request's history or an answer.
type Call struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function CallFunction `json:"function"`
}

type CallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// CallDelta is a streamed piece of a call: the first carries the id,
// type and name; later ones only index and an arguments fragment.
type CallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function *CallFunction `json:"function,omitempty"`
}

// ResponseFormat is a chat request's response_format.
type ResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// Markers of the convention.
const (
	CallOpen    = "<tool_call>\n"
	CallClose   = "\n</tool_call>"
	toolsHeader = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
	toolsFooter = "</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
	ChoiceParam = "tool_choice"
)

// Mode is what a request lets the model do with its tools.
type Mode struct {
	tools    []Tool
	Call     bool   // the answer is parsed for calls
	required bool   // the answer must be a call (grammar)
	named    string // the one function it must call
}

// Read checks a request's tools and tool_choice (OpenAI's values; the
// JSON text of the field, empty when absent). Every API's chat route uses
// it. Two tools of one name are a 400 naming the second, as OpenAI's and
// Anthropic's APIs answer: a call names its tool, so a forced call of that
// name could follow either schema.
func Read(tools []Tool, toolChoice json.RawMessage) (Mode, error) {
	var m Mode
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return m, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("tools[%d].type", i), "tools[%d].type is %q; only \"function\" is supported", i, t.Type)
		}
		at := t.place(i)
		if t.Function.Name == "" {
			return m, core.BadInput(core.CodeMissingParameter, at.Function+".name", "%s has no name", at.Function)
		}
		if seen[t.Function.Name] {
			return m, core.BadInput(core.CodeInvalidValue, at.Function+".name", "%s.name %q names a tool already named", at.Function, t.Function.Name)
		}
		seen[t.Function.Name] = true
		if len(t.Function.Parameters) > 0 {
			if err := core.CheckSchemaObject(t.Function.Parameters, at.Schema); err != nil {
				return m, err
			}
		}
	}
	choice := "auto"
	raw := bytes.TrimSpace(toolChoice)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		_ = json.Unmarshal(raw, &choice)
	default:
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
			return m, core.BadInput(core.CodeInvalidValue, ChoiceParam, `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": …}}`)
		}
		choice, m.named = "named", named.Function.Name
	}
	// The value is checked with tools or without: "bogus" is a 400 either way.
	switch choice {
	case "none", "auto", "required", "named":
	default:
		return m, core.BadInput(core.CodeInvalidValue, ChoiceParam, `tool_choice is %q; it must be "none", "auto" or "required"`, choice)
	}
	if len(tools) == 0 {
		if choice == "required" || choice == "named" {
			return m, core.BadInput(core.CodeInvalidValue, ChoiceParam, "tool_choice %s needs tools", choice)
		}
		return m, nil
	}
	switch choice {
	case "none":
		return m, nil
	case "required":
		m.required = true
	case "named":
		m.required = true
		found := false
		for _, t := range tools {
			found = found || t.Function.Name == m.named
		}
		if !found {
			return m, core.BadInput(core.CodeInvalidValue, ChoiceParam, "tool_choice names %q, which is not among the tools", m.named)
		}
	}
	if m.required {
		// The grammar enforces these schemas, so they must be ones it can.
		for i, t := range tools {
			if len(t.Function.Parameters) > 0 && (m.named == "" || t.Function.Name == m.named) {
				if err := core.CheckSchema(t.Function.Parameters, t.place(i).Schema); err != nil {
					return m, err
				}
			}
		}
	}
	m.tools, m.Call = tools, true
	return m, nil
}

// Output is the grammar constraint of a required call: one call of the
// named function, or of any of the tools.
func (m Mode) Output() (*engine.Output, error) {
	if !m.required {
		return nil, nil
	}
	var alts []json.RawMessage
	for _, t := range m.tools {
		if m.named != "" && t.Function.Name != m.named {
			continue
		}
		params := t.Function.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type": "object"}`)
		}
		name, _ := json.Marshal(t.Function.Name)
		alts = append(alts, json.RawMessage(fmt.Sprintf(
			`{"type": "object", "properties": {"name": {"const": %s}, "arguments": %s}, "required": ["name", "arguments"], "additionalProperties": false}`,
			name, params)))
	}
	schema := alts[0]
	if len(alts) > 1 {
		b, err := json.Marshal(map[string]any{"anyOf": alts})
		if err != nil {
			return nil, fmt.Errorf("tool schema: %w", err)
		}
		schema = b
	}
	return &engine.Output{Schema: schema, Prefix: CallOpen, Suffix: CallClose}, nil
}

// System is the tools' part of the system message.
func (m Mode) System() string {
	var b strings.Builder
	b.WriteString(toolsHeader)
	for _, t := range m.tools {
		b.Write(t.prompt())
		b.WriteByte('\n')
	}
	b.WriteString(toolsFooter)
	return b.String()
}

// Defs are the tools as JSON text (json.RawMessage, so a template's
// tojson keeps their key order), for a model whose own chat template
// renders them (engine.ToolTemplater).
func (m Mode) Defs() []any {
	out := make([]any, 0, len(m.tools))
	for _, t := range m.tools {
		out = append(out, json.RawMessage(t.prompt()))
	}
	return out
}

// prompt is the tool as the model reads it: its JSON with the schema in
// canonical form (strings as Go's encoder writes them without HTML
// escapes, numbers as sent, no whitespace, keys in the order sent, which
// orders the arguments the model reads), so a schema sent with other
// escaping ("\u2014" for "—") or spacing is the same prompt and the same
// cached KV.
func (t Tool) prompt() []byte {
	if params, err := canonicalSchema(t.Function.Parameters); err == nil {
		t.Function.Parameters = params
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(t) // a struct of strings and checked JSON
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// canonicalSchema is schema in canonical form; an error if it is not JSON.
func canonicalSchema(schema json.RawMessage) (json.RawMessage, error) {
	if len(schema) == 0 {
		return schema, nil
	}
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber() // a number's text as sent: 1.0 stays 1.0, as the grammar reads it
	var out bytes.Buffer
	if err := canonicalOrdered(&out, d); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("toolcall: more than one JSON value in a schema")
	}
	return out.Bytes(), nil
}

// canonicalOrdered writes the next JSON value of d, members in the order
// read, strings re-encoded without HTML escapes.
func canonicalOrdered(dst *bytes.Buffer, d *json.Decoder) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		closing := byte('}')
		if v == '[' {
			closing = ']'
		}
		dst.WriteByte(byte(v))
		for first := true; d.More(); first = false {
			if !first {
				dst.WriteByte(',')
			}
			if v == '{' {
				key, err := d.Token()
				if err != nil {
					return err
				}
				writeString(dst, key.(string))
				dst.WriteByte(':')
			}
			if err := canonicalOrdered(dst, d); err != nil {
				return err
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return err
		}
		dst.WriteByte(closing)
	case string:
		writeString(dst, v)
	case json.Number:
		dst.WriteString(v.String())
	case bool:
		dst.WriteString(strconv.FormatBool(v))
	case nil:
		dst.WriteString("null")
	}
	return nil
}

// writeString writes s as a JSON string, as Go's encoder does but
// without HTML escapes.
func writeString(dst *bytes.Buffer, s string) {
	enc := json.NewEncoder(dst)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	dst.Truncate(dst.Len() - 1) // Encode's newline
}

// Apply puts a chat's tools and output format into req, for the
// OpenAI and Ollama chat routes alike: the tools' definitions go to the
// model's own template where it renders them (engine.ToolTemplater), else
// into the system message; the output is constrained to format, or to a
// call when one is required (its arguments are the JSON asked for).
func Apply(t *core.Turn, req *engine.Request, tools Mode, format *engine.Output) error {
	if tools.Call && templatesTools(t.Backend) {
		req.Tools = tools.Defs()
	} else {
		req.Messages = tools.WithTools(req.Messages)
	}
	req.Sampling.Output = format
	call, err := tools.Output()
	if err != nil {
		return err
	}
	if call != nil {
		req.Sampling.Output = call
	}
	if req.Sampling.Output != nil && req.Sampling.Grammar != "" {
		return core.BadInput(core.CodeInvalidValue, "grammar", "grammar cannot be combined with response_format or a required tool call")
	}
	return nil
}

// WithTools puts the tools' definitions into the system message (the
// first one, or a new one).
func (m Mode) WithTools(msgs []engine.Message) []engine.Message {
	if !m.Call {
		return msgs
	}
	if len(msgs) > 0 && msgs[0].Role == engine.RoleSystem {
		out := append([]engine.Message(nil), msgs...)
		out[0].Content += "\n\n" + m.System()
		return out
	}
	return append([]engine.Message{{Role: engine.RoleSystem, Content: m.System()}}, msgs...)
}

// renderCalls is an assistant message's calls as the model writes them.
func renderCalls(calls []Call, at string) (string, error) {
	var b strings.Builder
	for i, c := range calls {
		args := strings.TrimSpace(c.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		if !json.Valid([]byte(args)) {
			return "", core.BadInput(core.CodeInvalidValue, fmt.Sprintf("%s.tool_calls[%d].function.arguments", at, i), "%s.tool_calls[%d].function.arguments is not JSON", at, i)
		}
		name, _ := json.Marshal(c.Function.Name)
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s{\"name\": %s, \"arguments\": %s}%s", CallOpen, name, args, CallClose)
	}
	return b.String(), nil
}

// Message is a history message as the model reads it in the convention:
// an assistant's calls follow its content as the model writes them, and a
// tool's result is a user turn inside <tool_response> (ChatML models read
// it so). Other messages are as they are. at names the message in errors.
func Message(role, content string, calls []Call, at string) (engine.Message, error) {
	switch {
	case role == engine.RoleAssistant && len(calls) > 0:
		rendered, err := renderCalls(calls, at)
		if err != nil {
			return engine.Message{}, err
		}
		if content != "" {
			rendered = content + "\n" + rendered
		}
		content = rendered
	case role == engine.RoleTool:
		role, content = engine.RoleUser, toolResponse(content)
	}
	return engine.Message{Role: role, Content: content}, nil
}

// toolResponse is a tool message as the model reads it.
func toolResponse(content string) string {
	return "<tool_response>\n" + content + "\n</tool_response>"
}

// ReadResponseFormat is the output constraint of response_format.
func ReadResponseFormat(f *ResponseFormat) (*engine.Output, error) {
	if f == nil {
		return nil, nil
	}
	switch f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return &engine.Output{}, nil
	case "json_schema":
		if f.JSONSchema == nil || len(f.JSONSchema.Schema) == 0 {
			return nil, core.BadInput(core.CodeMissingParameter, "response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
		}
		if err := core.CheckSchema(f.JSONSchema.Schema, "response_format.json_schema.schema"); err != nil {
			return nil, err
		}
		return &engine.Output{Schema: f.JSONSchema.Schema}, nil
	}
	return nil, core.BadInput(core.CodeInvalidValue, "response_format.type", `response_format.type is %q; it must be "text", "json_object" or "json_schema"`, f.Type)
}

// templatesTools reports whether b's model renders tools in its own chat
// template (engine.ToolTemplater), holding it to ask: a catalog's model
// is loaded for it, as the chat that asks is about to need it.
func templatesTools(b engine.Backend) bool {
	tt, release, err := engine.Hold[engine.ToolTemplater](context.Background(), b)
	if err != nil {
		return false
	}
	defer release()
	return tt.TemplateTools()
}
