package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// This file translates a Messages body into the engine's request: the
// parameters (through core.Params, so ranges and the model check are those
// of every route), the system prompt and messages into engine messages in
// web/toolcall's convention (an assistant's tool_use blocks are its calls,
// a tool_result a tool message), and tools with tool_choice into a
// toolcall.Mode (any and tool are a grammar-constrained call).

// blockJoin separates the text blocks of one system prompt, message or
// tool result: a paragraph break, so blocks read as the paragraphs a
// client meant them as (Claude Code sends its system prompt as several).
const blockJoin = "\n\n"

// toolName is what a tool may be called (Anthropic's pattern).
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// refuse is the 400 of what the body asks for that kvwin cannot honour,
// named, so a client never gets an answer that silently ignored it.
func refuse(b *messagesRequest) error {
	if err := checkThinking(b.Thinking, b.MaxTokens); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"container", b.Container}, {"mcp_servers", b.MCPServers}} {
		if raw := bytes.TrimSpace(f.raw); len(raw) > 0 && string(raw) != "null" {
			return core.BadInput(core.CodeInvalidValue, f.name, "%s is not supported: kvwin runs no server-side tools", f.name)
		}
	}
	return nil
}

// checkThinking reads thinking as Anthropic's API does (its types, and an
// enabled budget of at least 1,024 tokens below max_tokens) and asks
// nothing of the model: the served model does not think, so it answers
// without thinking blocks. That is adaptive thinking's contract (the model
// decides whether to think), and enabled thinking's budget is a ceiling;
// Claude Code sends adaptive thinking on every request, so a 400 here
// would refuse it whole.
func checkThinking(t *thinking, maxTokens *int) error {
	if t == nil {
		return nil
	}
	switch t.Type {
	case "disabled", "adaptive":
		return nil
	case "enabled":
		switch {
		case t.BudgetTokens == nil:
			return core.BadInput(core.CodeMissingParameter, "thinking.budget_tokens", "thinking.budget_tokens is required when thinking is enabled")
		case *t.BudgetTokens < 1024:
			return core.BadInput(core.CodeInvalidValue, "thinking.budget_tokens", "thinking.budget_tokens must be at least 1024, not %d", *t.BudgetTokens)
		case maxTokens != nil && *t.BudgetTokens >= *maxTokens:
			return core.BadInput(core.CodeInvalidValue, "thinking.budget_tokens", "thinking.budget_tokens (%d) must be less than max_tokens (%d)", *t.BudgetTokens, *maxTokens)
		}
		return nil
	}
	return core.BadInput(core.CodeInvalidValue, "thinking.type", `thinking.type is %q; it must be "enabled", "adaptive" or "disabled"`, t.Type)
}

// requestOf checks the body's parameters and makes the engine request for
// the backend described by info. max_tokens is required to generate (not
// to count); it is a cap clients size for Claude's limits (32000 and
// more), so beyond a slot's context it is the slot's context: generation
// stops there with max_tokens either way.
func requestOf(b *messagesRequest, info engine.Info, count bool) (engine.Request, error) {
	if b.Model == "" {
		return engine.Request{}, core.BadInput(core.CodeMissingParameter, "model", "model is required")
	}
	if v := b.Temperature; v != nil && (*v < 0 || *v > 1) {
		return engine.Request{}, core.OutOfRange("temperature", *v, 0, 1, "")
	}
	p := core.Params{Model: b.Model, Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK, Stop: b.StopSequences}
	if !count {
		switch {
		case b.MaxTokens == nil:
			return engine.Request{}, core.BadInput(core.CodeMissingParameter, "max_tokens", "max_tokens is required")
		case *b.MaxTokens < 1:
			return engine.Request{}, core.BadInput(core.CodeInvalidValue, "max_tokens", "max_tokens must be at least 1, not %d", *b.MaxTokens)
		}
		limit := min(*b.MaxTokens, core.ContextLimit(info))
		p.MaxTokens = &limit
	}
	return p.Request(info)
}

// engineMessages translates the system prompt and the messages.
func engineMessages(system json.RawMessage, in []message) ([]engine.Message, error) {
	if len(in) == 0 {
		return nil, core.BadInput(core.CodeMissingParameter, "messages", "messages must be a non-empty array")
	}
	var out []engine.Message
	sys, err := systemText(system)
	if err != nil {
		return nil, err
	}
	if sys != "" {
		out = append(out, engine.Message{Role: engine.RoleSystem, Content: sys})
	}
	for i, m := range in {
		at := fmt.Sprintf("messages[%d]", i)
		var msgs []engine.Message
		switch m.Role {
		case roleUser:
			msgs, err = userMessages(m.Content, at)
		case roleAssistant:
			var one engine.Message
			one, err = assistantMessage(m.Content, at)
			msgs = []engine.Message{one}
		case roleSystem:
			// A mid-conversation system message (Anthropic's, which Claude
			// Code sends): a system message where it stands, as chat
			// completions takes one; the window pins only leading ones.
			var text string
			text, err = instructions(m.Content, at+".content")
			msgs = []engine.Message{{Role: engine.RoleSystem, Content: text}}
		default:
			return nil, core.BadInput(core.CodeInvalidValue, at+".role", `%s.role is %q; it must be "user", "assistant" or "system"`, at, m.Role)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	if in[len(in)-1].Role == roleAssistant {
		return nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("messages[%d]", len(in)-1),
			"the last message is the assistant's: continuing a prefilled assistant turn is not supported; end with a user message")
	}
	return out, nil
}

// systemText reads system: absent, a string, or an array of text blocks.
func systemText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	return instructions(raw, "system")
}

// instructions reads a system prompt's content, at param: a string or
// text blocks, joined.
func instructions(raw json.RawMessage, param string) (string, error) {
	return textContent(raw, param, "system blocks must be text")
}

// textContent reads content that must be text, at param: a string, or
// text blocks joined by blockJoin; any other block is refused by rule.
func textContent(raw json.RawMessage, param, rule string) (string, error) {
	text, blocks, err := content(raw, param)
	if err != nil || blocks == nil {
		return text, err
	}
	texts := make([]string, 0, len(blocks))
	for j, b := range blocks {
		at := fmt.Sprintf("%s[%d]", param, j)
		if b.Type != typeText {
			return "", unsupportedBlock(b.Type, at, rule)
		}
		t, err := blockText(b, at)
		if err != nil {
			return "", err
		}
		texts = append(texts, t)
	}
	return strings.Join(texts, blockJoin), nil
}

// content reads a string or an array of blocks (nil blocks for a string).
func content(raw json.RawMessage, param string) (string, []block, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil, core.BadInput(core.CodeMissingParameter, param, "%s is required", param)
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, core.BadInput(core.CodeInvalidType, param, "%s is not a valid string", param)
		}
		return s, nil, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, core.BadInput(core.CodeInvalidType, param, "%s must be a string or an array of content blocks", param)
	}
	if blocks == nil {
		blocks = []block{}
	}
	return "", blocks, nil
}

// blockText is a text block's text, which must be there.
func blockText(b block, at string) (string, error) {
	if b.Text == nil {
		return "", core.BadInput(core.CodeMissingParameter, at+".text", "%s is a text block without text", at)
	}
	return *b.Text, nil
}

// unsupportedBlock is the 400 of a content block kvwin cannot read,
// naming what it is.
func unsupportedBlock(typ, at, rule string) error {
	why := rule
	switch typ {
	case "image":
		why = "images are not supported: the served model has no vision"
	case "document":
		why = "documents are not supported: send their text as text blocks"
	case typeThinking, typeRedactedThinking:
		why = "thinking blocks belong to assistant messages"
	}
	return core.BadInput(core.CodeInvalidValue, at+".type", "%s has type %q: %s", at, typ, why)
}

// userMessages reads a user message: its text blocks are one user
// message, each tool_result a tool message, in the order sent.
func userMessages(raw json.RawMessage, at string) ([]engine.Message, error) {
	text, blocks, err := content(raw, at+".content")
	if err != nil {
		return nil, err
	}
	if blocks == nil {
		return []engine.Message{{Role: engine.RoleUser, Content: text}}, nil
	}
	var (
		out   []engine.Message
		texts []string
	)
	flush := func() {
		if texts != nil {
			out = append(out, engine.Message{Role: engine.RoleUser, Content: strings.Join(texts, blockJoin)})
			texts = nil
		}
	}
	err = walkBlocks(blocks, at, func(t string) { texts = append(texts, t) }, func(b block, bat string) error {
		if b.Type != typeToolResult {
			return unsupportedBlock(b.Type, bat, "a user message holds text and tool_result blocks")
		}
		flush()
		result, err := toolResult(b, bat)
		if err != nil {
			return err
		}
		m, err := toolcall.Message(engine.RoleTool, result, nil, bat)
		out = append(out, m)
		return err
	})
	if err != nil {
		return nil, err
	}
	flush()
	if len(out) == 0 {
		out = []engine.Message{{Role: engine.RoleUser}}
	}
	return out, nil
}

// walkBlocks reads a message's blocks in order: each text block's text
// goes to text, every other block to other with its path in the request.
func walkBlocks(blocks []block, at string, text func(string), other func(b block, at string) error) error {
	for j, b := range blocks {
		bat := fmt.Sprintf("%s.content[%d]", at, j)
		if b.Type != typeText {
			if err := other(b, bat); err != nil {
				return err
			}
			continue
		}
		t, err := blockText(b, bat)
		if err != nil {
			return err
		}
		text(t)
	}
	return nil
}

// toolResult is a tool_result block's content as the model reads it; an
// error result says so first.
func toolResult(b block, at string) (string, error) {
	if b.ToolUseID == "" {
		return "", core.BadInput(core.CodeMissingParameter, at+".tool_use_id", "%s has no tool_use_id", at)
	}
	var text string
	if raw := bytes.TrimSpace(b.Content); len(raw) > 0 && string(raw) != "null" {
		t, err := textContent(raw, at+".content", "a tool result holds text blocks")
		if err != nil {
			return "", err
		}
		text = t
	}
	if b.IsError {
		text = "Error: " + text
	}
	return text, nil
}

// assistantMessage reads an assistant message: its text, then its
// tool_use blocks as calls, as the model writes them.
func assistantMessage(raw json.RawMessage, at string) (engine.Message, error) {
	text, blocks, err := content(raw, at+".content")
	if err != nil || blocks == nil {
		return engine.Message{Role: engine.RoleAssistant, Content: text}, err
	}
	var (
		texts []string
		calls []toolcall.Call
	)
	err = walkBlocks(blocks, at, func(t string) { texts = append(texts, t) }, func(b block, bat string) error {
		switch b.Type {
		case typeToolUse:
			call, err := toolUse(b, bat)
			calls = append(calls, call)
			return err
		case typeThinking, typeRedactedThinking:
			// An earlier turn's thinking (another model's: the served
			// one writes none) is not context: Anthropic's API drops the
			// thinking blocks of earlier turns from the prompt too.
			return nil
		}
		return unsupportedBlock(b.Type, bat, "an assistant message holds text and tool_use blocks")
	})
	if err != nil {
		return engine.Message{}, err
	}
	return toolcall.Message(engine.RoleAssistant, strings.Join(texts, blockJoin), calls, at)
}

// toolUse is a tool_use block as the call the model made.
func toolUse(b block, at string) (toolcall.Call, error) {
	if b.Name == "" {
		return toolcall.Call{}, core.BadInput(core.CodeMissingParameter, at+".name", "%s has no name", at)
	}
	input := bytes.TrimSpace(b.Input)
	if len(input) == 0 || input[0] != '{' || !json.Valid(input) {
		return toolcall.Call{}, core.BadInput(core.CodeInvalidValue, at+".input", "%s.input must be a JSON object", at)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, input) // valid, checked above
	return toolcall.Call{ID: b.ID, Type: "function", Function: toolcall.CallFunction{Name: b.Name, Arguments: compact.String()}}, nil
}

// readTools checks tools and tool_choice and reads them as web/toolcall's
// mode (OpenAI's words: any is "required", tool a named function), and
// whether parallel calls are off.
func readTools(tools []tool, choice *toolChoice) (toolcall.Mode, bool, error) {
	defs := make([]toolcall.Tool, 0, len(tools))
	for i, t := range tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			return toolcall.Mode{}, false, core.BadInput(core.CodeInvalidValue, at+".type",
				"%s has type %q: Anthropic's server tools are not supported; kvwin serves client tools (name, input_schema)", at, t.Type)
		}
		if !toolName.MatchString(t.Name) {
			return toolcall.Mode{}, false, core.BadInput(core.CodeInvalidValue, at+".name", "%s.name %q must be 1-128 letters, digits, '_' or '-'", at, t.Name)
		}
		if raw := bytes.TrimSpace(t.InputSchema); len(raw) == 0 || string(raw) == "null" {
			return toolcall.Mode{}, false, core.BadInput(core.CodeMissingParameter, at+".input_schema", "%s.input_schema is required", at)
		}
		if err := core.CheckSchemaObject(t.InputSchema, at+".input_schema"); err != nil {
			return toolcall.Mode{}, false, err
		}
		defs = append(defs, toolcall.Tool{Type: "function", Function: toolcall.Function{Name: t.Name, Description: t.Description, Parameters: t.InputSchema},
			At: toolcall.Place{Function: at, Schema: at + ".input_schema"}})
	}
	var raw json.RawMessage
	single := false
	if choice != nil {
		single = choice.DisableParallelToolUse
		switch choice.Type {
		case "auto":
			raw = json.RawMessage(`"auto"`)
		case "none":
			raw = json.RawMessage(`"none"`)
		case "any", "tool":
			if len(tools) == 0 {
				return toolcall.Mode{}, false, core.BadInput(core.CodeInvalidValue, toolcall.ChoiceParam, "tool_choice %s needs tools", choice.Type)
			}
			raw = json.RawMessage(`"required"`)
			if choice.Type == "tool" {
				if choice.Name == "" {
					return toolcall.Mode{}, false, core.BadInput(core.CodeMissingParameter, "tool_choice.name", `tool_choice {"type": "tool"} needs a name`)
				}
				named, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": choice.Name}})
				raw = named
			}
		default:
			return toolcall.Mode{}, false, core.BadInput(core.CodeInvalidValue, "tool_choice.type", `tool_choice.type is %q; it must be "auto", "any", "tool" or "none"`, choice.Type)
		}
	}
	mode, err := toolcall.Read(defs, raw)
	return mode, single, err
}

// outputFormat is output_config.format's constraint: a JSON Schema the
// answer follows, by grammar.
func outputFormat(oc *outputConfig) (*engine.Output, error) {
	if oc == nil || oc.Format == nil {
		return nil, nil
	}
	if oc.Format.Type != "json_schema" {
		return nil, core.BadInput(core.CodeInvalidValue, "output_config.format.type", `output_config.format.type is %q; it must be "json_schema"`, oc.Format.Type)
	}
	if raw := bytes.TrimSpace(oc.Format.Schema); len(raw) == 0 || string(raw) == "null" {
		return nil, core.BadInput(core.CodeMissingParameter, "output_config.format.schema", "output_config.format.schema is required")
	}
	if err := core.CheckSchema(oc.Format.Schema, "output_config.format.schema"); err != nil {
		return nil, err
	}
	return &engine.Output{Schema: oc.Format.Schema}, nil
}
