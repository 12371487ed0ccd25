package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
	"kvwin/web/toolcall"
	"kvwin/window"
)

// The Responses API (POST /v1/responses) through the one turn pipeline: the
// body becomes one engine.Request, windowed as a chat, with the tools and
// output format of chat completions (web/toolcall), answered by the
// responses encoder (responses_stream.go). With store (the default), the
// response and what it added to its conversation are kept in the memory
// store (responses_store.go): previous_response_id continues that chain
// with only the new input, and the chain is a named conversation for the
// window, so its evicted turns come back as packets.

// Values of the Responses API kvwin reads.
const (
	objectResponse     = "response"
	truncationAuto     = "auto"
	truncationDisabled = "disabled"
	itemMessage        = "message"
	itemFunctionCall   = "function_call"
	itemCallOutput     = "function_call_output"
	itemReasoning      = "reasoning"
)

// vacuousIncludes are include values that ask for parts of items kvwin
// never produces (built-in tools, images are refused): always filled.
var vacuousIncludes = map[string]bool{
	"file_search_call.results": true, "web_search_call.results": true, "web_search_call.action.sources": true,
	"message.input_image.image_url": true, "computer_call_output.output.image_url": true, "code_interpreter_call.outputs": true,
	"reasoning.encrypted_content": true, // the served model writes no reasoning items
}

// reasoningEfforts and reasoningSummaries are reasoning's values.
var (
	reasoningEfforts   = []string{"none", "minimal", "low", "medium", "high", "xhigh"}
	reasoningSummaries = []string{"auto", "concise", "detailed"}
)

// responseTurn is one POST /v1/responses as translated: the engine request
// and what its answer and its stored record need.
type responseTurn struct {
	body     responsesRequest
	id       string
	req      engine.Request
	info     engine.Info
	tools    toolcall.Mode
	names    toolNames
	key      string           // the conversation ("" unnamed)
	input    []engine.Message // what the new input adds to the chain
	items    []listedItem     // the new input's items, as input_items lists them
	store    bool
	previous string
	// history is the chain as stored (its messages shared with the
	// memo: read only).
	history chainHistory
}

// createResponse serves POST /v1/responses.
func (s *server) createResponse(c *gin.Context, t *core.Turn) error {
	rt, err := s.readResponse(c, t)
	if err != nil {
		return err
	}
	enc := s.newResponsesEncoder(c, t, rt)
	s.RunTurn(c, t, rt.req, core.Wire{Enc: enc, Stream: rt.body.Stream, Frame: core.FrameEvents, Fail: core.Fail})
	return nil
}

// readResponse decodes and translates the body, the chain it continues
// included, and windows it.
func (s *server) readResponse(c *gin.Context, t *core.Turn) (*responseTurn, error) {
	var raw json.RawMessage
	if err := s.Decode(c, &raw); err != nil {
		return nil, err
	}
	rt := &responseTurn{}
	if err := decodeResponses(raw, &rt.body); err != nil {
		return nil, err
	}
	b := &rt.body
	params := core.Params{Model: b.Model, Stream: b.Stream, MaxCompletionTokens: b.MaxOutputTokens, Temperature: b.Temperature, TopP: b.TopP, IgnoreEOS: b.IgnoreEOS}
	_, info, err := s.SelectBackend(t, b.Model)
	if err != nil {
		return nil, err
	}
	if rt.req, err = params.Request(info); err != nil {
		return nil, renameParam(err, "max_completion_tokens", "max_output_tokens")
	}
	rt.info, rt.id = info, s.NewID("resp_")
	rt.store = b.Store == nil || *b.Store
	if rt.input, rt.items, err = inputMessages(b.Input, s.NewID); err != nil {
		return nil, err
	}
	if err := s.CheckItems("input", len(rt.items)); err != nil {
		return nil, err
	}
	history, err := s.chain(c, t, rt)
	if err != nil {
		return nil, err
	}
	var msgs []engine.Message
	if b.Instructions != nil && *b.Instructions != "" {
		msgs = append(msgs, engine.Message{Role: engine.RoleSystem, Content: *b.Instructions})
	}
	rt.req.Messages = append(append(msgs, history...), rt.input...)
	if rt.tools, rt.names, err = readResponseTools(b.Tools, b.ToolChoice); err != nil {
		return nil, err
	}
	format, err := readTextFormat(b.Text)
	if err != nil {
		return nil, err
	}
	if err := toolcall.Apply(t, &rt.req, rt.tools, format); err != nil {
		return nil, err
	}
	policy := c.GetHeader(wire.HeaderWindowPolicy)
	switch b.Truncation {
	case "", truncationAuto:
	case truncationDisabled:
		policy = window.PolicyFull
	default:
		return nil, core.BadInput(core.CodeInvalidValue, "truncation", `truncation is %q; it must be "auto" or "disabled"`, b.Truncation)
	}
	if err := s.WindowAs(c, t, rt.key, policy, &rt.req); err != nil {
		return nil, err
	}
	return rt, nil
}

// decodeResponses reads the body into b after refusing the fields kvwin
// cannot honour.
func decodeResponses(raw json.RawMessage, b *responsesRequest) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return core.BadInput(core.CodeInvalidType, "", "the body must be a JSON object")
	}
	if name, ok := unknownField(fields); ok {
		return core.BadInput(core.CodeUnknownParameter, name, "Unknown parameter: '%s'.", name)
	}
	for _, name := range refusedFields {
		if v, ok := fields[name]; ok && !emptyJSON(v) {
			return core.BadInput(core.CodeInvalidValue, name, "%s is not supported by kvwin; send the request without it", name)
		}
	}
	if err := json.Unmarshal(raw, b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return core.BadInput(core.CodeInvalidType, te.Field, "%s must be of JSON type %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return core.BadInput(core.CodeInvalidType, "", "the body does not decode: %v", err)
	}
	b.rawTools = fields["tools"]
	if r := b.Reasoning; r != nil {
		for _, f := range []struct {
			param string
			v     *string
			in    []string
		}{{"reasoning.effort", r.Effort, reasoningEfforts}, {"reasoning.summary", r.Summary, reasoningSummaries},
			{"reasoning.generate_summary", r.GenerateSummary, reasoningSummaries}} {
			if f.v != nil && !slices.Contains(f.in, *f.v) {
				return core.BadInput(core.CodeInvalidValue, f.param, "%s is %q; it must be one of %s", f.param, *f.v, strings.Join(f.in, ", "))
			}
		}
	}
	for i, inc := range b.Include {
		if !vacuousIncludes[inc] {
			return core.BadInput(core.CodeInvalidValue, fmt.Sprintf("include[%d]", i), "include %q is not supported by kvwin", inc)
		}
	}
	if err := checkMetadata(b.Metadata); err != nil {
		return err
	}
	if t := b.Text; t != nil && t.Verbosity != "" && !slices.Contains(verbosities, t.Verbosity) {
		return core.BadInput(core.CodeInvalidValue, "text.verbosity", "text.verbosity is %q; it must be one of %s", t.Verbosity, strings.Join(verbosities, ", "))
	}
	return nil
}

// verbosities are text.verbosity's values.
var verbosities = []string{"low", "medium", "high"}

// Bounds of metadata, as OpenAI states them: it is echoed in every answer
// and kept with a stored response.
const (
	maxMetadataPairs      = 16
	maxMetadataKeyChars   = 64
	maxMetadataValueChars = 512
)

// checkMetadata refuses metadata over OpenAI's bounds (its values are
// strings by their type), naming the first key at fault in key order.
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return core.BadInput(core.CodeInvalidValue, "metadata", "metadata holds %d keys; at most %d are allowed", len(md), maxMetadataPairs)
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if n := utf8.RuneCountInString(k); n > maxMetadataKeyChars {
			return core.BadInput(core.CodeInvalidValue, "metadata", "metadata key %q… is %d characters; at most %d are allowed", firstChars(k, maxMetadataKeyChars), n, maxMetadataKeyChars)
		}
		if n := utf8.RuneCountInString(md[k]); n > maxMetadataValueChars {
			return core.BadInput(core.CodeInvalidValue, "metadata", "metadata[%q] is %d characters; at most %d are allowed", k, n, maxMetadataValueChars)
		}
	}
	return nil
}

// firstChars is s's first n characters.
func firstChars(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// emptyJSON reports whether a field's value means "not set"; an absent
// field's raw JSON is empty.
func emptyJSON(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case "", "null", "false", "0", `""`, "{}", "[]":
		return true
	}
	return false
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// renameParam is err with another parameter's name: Params names the chat
// API's, which this API spells otherwise.
func renameParam(err error, from, to string) error {
	var in *core.InputError
	if !errors.As(err, &in) || in.Param() != from {
		return err
	}
	return core.BadInput(core.CodeInvalidValue, to, "%s", strings.ReplaceAll(in.Error(), from, to))
}

// inputMessages translates input (a string, or an array of items) into the
// messages it adds and the items it lists, each with an id.
func inputMessages(raw json.RawMessage, newID func(string) string) ([]engine.Message, []listedItem, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, core.BadInput(core.CodeMissingParameter, "input", "input is required")
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, nil, core.BadInput(core.CodeInvalidType, "input", "input is not a valid string")
		}
		item := listedItem{Type: itemMessage, ID: newID("msg_"), Role: engine.RoleUser, Status: "completed",
			Content: []textPart{{Type: "input_text", Text: text}}}
		return []engine.Message{{Role: engine.RoleUser, Content: text}}, []listedItem{item}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, core.BadInput(core.CodeInvalidType, "input", "input must be a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, nil, core.BadInput(core.CodeMissingParameter, "input", "input must not be empty")
	}
	var (
		out    []engine.Message
		listed []listedItem
		turn   assistantTurn      // an assistant's text and calls, merged into one message
		ids    = map[string]int{} // the input items' own ids: input_items pages by them
	)
	for i, it := range items {
		at := fmt.Sprintf("input[%d]", i)
		if it.Type == itemReasoning {
			// Another model's reasoning (the served one writes none): not
			// context kvwin can use, and its encrypted content is OpenAI's.
			continue
		}
		if it.ID != "" {
			if j, ok := ids[it.ID]; ok {
				return nil, nil, core.BadInput(core.CodeInvalidValue, at+".id", "%s.id %q is input[%d]'s too: an item's id names one item", at, it.ID, j)
			}
			ids[it.ID] = i
		}
		li, msg, err := readItem(it, at, newID)
		if err != nil {
			return nil, nil, err
		}
		listed = append(listed, li)
		switch {
		case it.Type == itemFunctionCall:
			turn.open = true
			turn.calls = append(turn.calls, toolcall.Call{ID: it.CallID, Type: "function",
				Function: toolcall.CallFunction{Name: flatName(it.Namespace, it.Name), Arguments: *li.Arguments}})
		case msg.Role == engine.RoleAssistant && turn.open && len(turn.calls) == 0:
			turn.text += msg.Content // two assistant messages in a row read as one answer
		case msg.Role == engine.RoleAssistant:
			if out, err = turn.flush(out, at); err != nil {
				return nil, nil, err
			}
			turn = assistantTurn{open: true, text: msg.Content}
		default:
			if out, err = turn.flush(out, at); err != nil {
				return nil, nil, err
			}
			out = append(out, msg)
		}
	}
	out, err := turn.flush(out, "input")
	return out, listed, err
}

// assistantTurn gathers an assistant's message and function_call items,
// which the model wrote as one answer.
type assistantTurn struct {
	open  bool
	text  string
	calls []toolcall.Call
}

func (a *assistantTurn) flush(out []engine.Message, at string) ([]engine.Message, error) {
	if !a.open {
		return out, nil
	}
	m, err := toolcall.Message(engine.RoleAssistant, a.text, a.calls, at)
	*a = assistantTurn{}
	if err != nil {
		return out, err
	}
	return append(out, m), nil
}

// readItem checks one input item and translates it: its listed form and,
// for a message or a call's output, the message it is.
func readItem(it inputItem, at string, newID func(string) string) (listedItem, engine.Message, error) {
	switch it.Type {
	case "", itemMessage:
		role := it.Role
		if role == roleDeveloper {
			role = engine.RoleSystem
		}
		switch role {
		case engine.RoleUser, engine.RoleSystem, engine.RoleAssistant:
		default:
			return listedItem{}, engine.Message{}, core.BadInput(core.CodeInvalidValue, at+".role",
				"%s.role is %q; it must be one of user, system, developer, assistant", at, it.Role)
		}
		text, parts, err := itemText(it.Content, at+".content", role == engine.RoleAssistant)
		if err != nil {
			return listedItem{}, engine.Message{}, err
		}
		id := it.ID
		if id == "" {
			id = newID("msg_")
		}
		return listedItem{Type: itemMessage, ID: id, Role: it.Role, Content: parts, Status: "completed"},
			engine.Message{Role: role, Content: text}, nil
	case itemFunctionCall:
		if it.CallID == "" || it.Name == "" || it.Arguments == nil {
			return listedItem{}, engine.Message{}, core.BadInput(core.CodeMissingParameter, at, "%s: a function_call needs call_id, name and arguments", at)
		}
		id := it.ID
		if id == "" {
			id = newID("fc_")
		}
		return listedItem{Type: itemFunctionCall, ID: id, CallID: it.CallID, Name: it.Name, Namespace: it.Namespace, Arguments: it.Arguments, Status: "completed"}, engine.Message{}, nil
	case itemCallOutput:
		if it.CallID == "" {
			return listedItem{}, engine.Message{}, core.BadInput(core.CodeMissingParameter, at+".call_id", "%s: a function_call_output needs call_id", at)
		}
		text, _, err := itemText(it.Output, at+".output", false)
		if err != nil {
			return listedItem{}, engine.Message{}, err
		}
		id := it.ID
		if id == "" {
			id = newID("fco_")
		}
		msg, err := toolcall.Message(engine.RoleTool, text, nil, at)
		return listedItem{Type: itemCallOutput, ID: id, CallID: it.CallID, Output: &text, Status: "completed"}, msg, err
	}
	return listedItem{}, engine.Message{}, core.BadInput(core.CodeInvalidValue, at+".type",
		"%s.type is %q; kvwin supports message, function_call and function_call_output items", at, it.Type)
}

// itemText reads a message's content or a call's output: a string, or an
// array of text parts (input_text; output_text in an assistant's message),
// concatenated as they are.
func itemText(raw json.RawMessage, param string, assistant bool) (string, []textPart, error) {
	raw = bytes.TrimSpace(raw)
	partType := "input_text"
	if assistant {
		partType = "output_text"
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, core.BadInput(core.CodeMissingParameter, param, "%s is required", param)
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", nil, core.BadInput(core.CodeInvalidType, param, "%s is not a valid string", param)
		}
		return text, []textPart{{Type: partType, Text: text}}, nil
	}
	var parts []inputPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, core.BadInput(core.CodeInvalidType, param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	var listed []textPart
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
		default:
			return "", nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("%s[%d].type", param, i),
				"%s[%d] has type %q; kvwin supports only text parts (input_text, output_text)", param, i, p.Type)
		}
		if p.Text == nil {
			return "", nil, core.BadInput(core.CodeMissingParameter, fmt.Sprintf("%s[%d].text", param, i), "%s[%d] has no text", param, i)
		}
		b.WriteString(*p.Text)
		listed = append(listed, textPart{Type: partType, Text: *p.Text})
	}
	return b.String(), listed, nil
}

// toolNames are the functions of namespaces, by the name the model sees
// and calls (flatName), with their own.
type toolNames map[string]qualifiedName

type qualifiedName struct{ namespace, name string }

// flatName is a namespace's function as the model sees it: namespace.name.
// A function's name is letters, digits, '_' and '-', so it is no other
// function's name.
func flatName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "." + name
}

// hostedTool reports a tool type of OpenAI's own, which it runs itself (or
// its clients run for it: shell, apply_patch), or a custom tool of
// free-form input. kvwin runs none, and so offers them to no model: the
// answer is one the model could give with them available and unused. A
// tool_choice forcing one is a 400.
func hostedTool(typ string) bool { return typ != itemFunctionTool && typ != toolNamespace }

const (
	itemFunctionTool = "function"
	toolNamespace    = "namespace"
)

// readResponseTools reads tools and tool_choice in the Responses API's
// shapes (flat functions; {"type": "function", "name": …}; namespaces of
// functions, flattened to namespace.name) through the chat completions'
// reading, which refuses two tools of one name (a namespace's flattened).
func readResponseTools(tools []responseTool, choice json.RawMessage) (toolcall.Mode, toolNames, error) {
	var (
		chat  []toolcall.Tool
		names toolNames
	)
	for i, t := range tools {
		switch {
		case t.Type == "":
			return toolcall.Mode{}, nil, core.BadInput(core.CodeMissingParameter, fmt.Sprintf("tools[%d].type", i), "tools[%d] has no type", i)
		case t.Type == toolNamespace:
			if t.Name == "" {
				return toolcall.Mode{}, nil, core.BadInput(core.CodeMissingParameter, fmt.Sprintf("tools[%d].name", i), "tools[%d] is a namespace without a name", i)
			}
			for j, f := range t.Tools {
				if f.Type != itemFunctionTool {
					continue // a custom tool: not offered, as hosted tools are not
				}
				if names == nil {
					names = toolNames{}
				}
				flat := flatName(t.Name, f.Name)
				names[flat] = qualifiedName{namespace: t.Name, name: f.Name}
				fat := fmt.Sprintf("tools[%d].tools[%d]", i, j)
				chat = append(chat, toolcall.Tool{Type: "function", Function: toolcall.Function{Name: flat, Description: f.Description, Parameters: f.Parameters, Strict: f.Strict},
					At: toolcall.Place{Function: fat, Schema: fat + ".parameters"}})
			}
		case hostedTool(t.Type):
			// Not offered (hostedTool).
		default:
			tat := fmt.Sprintf("tools[%d]", i)
			chat = append(chat, toolcall.Tool{Type: "function", Function: toolcall.Function{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict},
				At: toolcall.Place{Function: tat, Schema: tat + ".parameters"}})
		}
	}
	choice = bytes.TrimSpace(choice)
	if len(choice) > 0 && choice[0] == '{' {
		var named struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		}
		if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" || named.Name == "" {
			return toolcall.Mode{}, nil, core.BadInput(core.CodeInvalidValue, toolcall.ChoiceParam,
				`tool_choice must be "none", "auto", "required" or {"type": "function", "name": …}: kvwin runs no built-in tools`)
		}
		name, _ := json.Marshal(flatName(named.Namespace, named.Name))
		choice = json.RawMessage(`{"type": "function", "function": {"name": ` + string(name) + `}}`)
	}
	m, err := toolcall.Read(chat, choice)
	return m, names, err
}

// readTextFormat is the output constraint of text.format.
func readTextFormat(t *responseText) (*engine.Output, error) {
	if t == nil || t.Format == nil {
		return nil, nil
	}
	switch f := t.Format; f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return &engine.Output{}, nil
	case "json_schema":
		if len(f.Schema) == 0 {
			return nil, core.BadInput(core.CodeMissingParameter, "text.format.schema", "text.format json_schema needs a schema")
		}
		if err := core.CheckSchema(f.Schema, "text.format.schema"); err != nil {
			return nil, err
		}
		return &engine.Output{Schema: f.Schema}, nil
	default:
		return nil, core.BadInput(core.CodeInvalidValue, "text.format.type", `text.format.type is %q; it must be "text", "json_object" or "json_schema"`, f.Type)
	}
}

// knownFields are the top-level fields a Responses request may have: the
// request's own (responsesRequest's JSON names), refusedFields and
// acceptedFields.
var knownFields = func() map[string]bool {
	known := map[string]bool{}
	t := reflect.TypeFor[responsesRequest]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			known[name] = true
		}
	}
	for _, name := range append(slices.Clone(refusedFields), acceptedFields...) {
		known[name] = true
	}
	return known
}()

// unknownField is the first field of fields (by name) that a Responses
// request does not have.
func unknownField(fields map[string]json.RawMessage) (string, bool) {
	var unknown []string
	for name := range fields {
		if !knownFields[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return "", false
	}
	return slices.Min(unknown), true
}
