package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// encoder renders a Messages answer: whole, a message object with its
// content blocks; streamed, Anthropic's events:
//
//	message_start        the message, no content yet (with the headers, once the
//	                     backend accepted the request; usage 0 then, see Opening)
//	ping                 and another every keep-alive until the first token
//	content_block_start  a text block when text comes, a tool_use block when a call's name is known
//	content_block_delta  text_delta / input_json_delta fragments (they add up to the block)
//	content_block_stop
//	…
//	message_delta        stop_reason, stop_sequence and the whole usage
//	message_stop
//
// With tools the answer goes through a toolcall.Parser: text before a
// call is a text block, each call a tool_use block whose input streams as
// it is generated. A new encoder serves one request.
type encoder struct {
	id, model string
	calls     *toolcall.Parser // nil without tools
	stops     []string         // the request's stop sequences

	// Streaming state: the index of the open block (-1 none) and its type.
	open     int
	openType string
	next     int // index of the next block
	called   bool
	started  bool // message_start is out
}

var (
	_ core.Encoder    = (*encoder)(nil)
	_ core.Opener     = (*encoder)(nil)
	_ core.KeepAliver = (*encoder)(nil)
)

// newEncoder renders message id of model; with tools, calls are parsed
// out of the answer (only the first with single), their ids from newID.
func newEncoder(id, model string, tools, single bool, stops []string, newID func(string) string) *encoder {
	e := &encoder{id: id, model: model, stops: stops, open: -1}
	if tools {
		e.calls = &toolcall.Parser{NewID: func() string { return newID("toolu_") }, Single: single}
	}
	return e
}

// usageOf is the usage of a generation's timings.
func usageOf(t engine.Timings, output int) usage {
	return usage{InputTokens: max(t.PromptTokens-t.CachedTokens, 0), CacheReadInputTokens: t.CachedTokens, OutputTokens: output}
}

// stopReason is Anthropic's stop reason and stop sequence of a result.
func (e *encoder) stopReason(res engine.Result, called bool) (string, *string) {
	switch {
	case res.FinishReason == engine.FinishLength:
		return stopMaxTokens, nil
	case called:
		return stopToolUse, nil
	case res.StopSequence != "":
		seq := res.StopSequence
		return stopStopSequence, &seq
	}
	return stopEndTurn, nil
}

// input is a call's arguments as a tool_use block's input: the object the
// model wrote, or {} for one cut short (max_tokens inside it).
func input(args string) json.RawMessage {
	raw := bytes.TrimSpace([]byte(args))
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return json.RawMessage(`{}`)
	}
	return raw
}

func (e *encoder) Whole(res engine.Result) any {
	text, content := res.Text, []any{}
	var calls []toolcall.Call
	if e.calls != nil {
		got := e.calls.Feed(res.Text)
		text = got.Content + e.calls.Flush().Content
		calls = e.calls.Calls
		if len(calls) > 0 && strings.TrimSpace(text) == "" {
			text = ""
		}
	}
	if text != "" {
		content = append(content, textBlock{Type: typeText, Text: text})
	}
	for _, c := range calls {
		content = append(content, toolUseBlock{Type: typeToolUse, ID: c.ID, Name: c.Function.Name, Input: input(c.Function.Arguments)})
	}
	reason, seq := e.stopReason(res, len(calls) > 0)
	return messageObject{ID: e.id, Type: typeMessage, Role: roleAssistant, Model: e.model, Content: content,
		StopReason: &reason, StopSequence: seq, Usage: usageOf(res.Timings, core.OutputTokens(res))}
}

// Opening renders message_start and a ping, sent once the backend accepted
// the request. Its usage is zero: how much of the prompt is reused is
// known only once a slot takes it; message_delta carries the whole usage,
// which Anthropic's SDKs take over message_start's.
func (e *encoder) Opening() []any { return e.start(engine.Timings{}) }

// start renders message_start with the prompt's usage t, and a ping.
func (e *encoder) start(t engine.Timings) []any {
	e.started = true
	start := startEvent{Type: eventStart, Message: messageObject{ID: e.id, Type: typeMessage, Role: roleAssistant,
		Model: e.model, Content: []any{}, Usage: usageOf(t, 0)}}
	return []any{start, bareEvent{Type: eventPing}}
}

// KeepAlive is Anthropic's own: a ping event.
func (e *encoder) KeepAlive() any { return bareEvent{Type: eventPing} }

func (e *encoder) Open(ev engine.Event) []any {
	var out []any
	if !e.started {
		out = e.start(ev.Timings)
	}
	return append(out, e.Text(ev.Text)...)
}

func (e *encoder) Text(s string) []any {
	if e.calls == nil {
		return e.text(nil, s)
	}
	got := e.calls.Feed(s)
	out := e.text(nil, got.Content)
	for _, d := range got.Deltas {
		if d.ID != "" { // a new call
			out = e.closeBlock(out)
			e.called = true
			out = e.openBlock(out, typeToolUse, toolUseBlock{Type: typeToolUse, ID: d.ID, Name: d.Function.Name, Input: json.RawMessage(`{}`)})
		}
		if d.Function != nil && d.Function.Arguments != "" {
			out = append(out, blockDeltaEvent{Type: eventBlockDelta, Index: e.open, Delta: inputJSONDelta{Type: deltaInputJSON, PartialJSON: d.Function.Arguments}})
		}
	}
	if e.openType == typeToolUse && !e.calls.InArgs() {
		out = e.closeBlock(out) // the call's input is whole
	}
	return out
}

// text appends s as a text delta, opening a text block first if none is.
func (e *encoder) text(out []any, s string) []any {
	if s == "" {
		return out
	}
	if e.openType != typeText {
		out = e.closeBlock(out)
		out = e.openBlock(out, typeText, textBlock{Type: typeText, Text: ""})
	}
	return append(out, blockDeltaEvent{Type: eventBlockDelta, Index: e.open, Delta: textDelta{Type: deltaText, Text: s}})
}

func (e *encoder) openBlock(out []any, typ string, blk any) []any {
	e.open, e.openType = e.next, typ
	e.next++
	return append(out, blockStartEvent{Type: eventBlockStart, Index: e.open, ContentBlock: blk})
}

func (e *encoder) closeBlock(out []any) []any {
	if e.open < 0 {
		return out
	}
	out = append(out, blockStopEvent{Type: eventBlockStop, Index: e.open})
	e.open, e.openType = -1, ""
	return out
}

func (e *encoder) End(res engine.Result) []any {
	var out []any
	if e.calls != nil {
		out = e.text(out, e.calls.Flush().Content)
	}
	out = e.closeBlock(out)
	reason, seq := e.stopReason(res, e.called)
	d := deltaEvent{Type: eventDelta, Usage: usageOf(res.Timings, core.OutputTokens(res))}
	d.Delta.StopReason, d.Delta.StopSequence = &reason, seq
	return append(out, d, bareEvent{Type: eventStop})
}

func (e *encoder) StreamError(err error) any {
	_, body := Shape(err)
	return body
}
