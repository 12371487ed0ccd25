package openai

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// The responses encoder: a whole response object, or its typed SSE events
// (response.created, response.in_progress, then per output item
// output_item.added, content_part.added, output_text.delta …
// output_text.done, content_part.done, output_item.done, or for a call
// function_call_arguments.delta … .done, and last response.completed or
// response.incomplete; response.failed for an error after the first
// event), each with its sequence_number. With tools the answer goes
// through toolcall's parser, so calls become function_call items whose
// argument fragments add up to the whole call. The response is stored
// (finish) before its last object is rendered, so a client that has it can
// continue from it at once.

// Stream event types.
const (
	evCreated        = "response.created"
	evInProgress     = "response.in_progress"
	evItemAdded      = "response.output_item.added"
	evItemDone       = "response.output_item.done"
	evPartAdded      = "response.content_part.added"
	evPartDone       = "response.content_part.done"
	evTextDelta      = "response.output_text.delta"
	evTextDone       = "response.output_text.done"
	evArgsDelta      = "response.function_call_arguments.delta"
	evArgsDone       = "response.function_call_arguments.done"
	evCompleted      = "response.completed"
	evIncomplete     = "response.incomplete"
	evFailed         = "response.failed"
	statusCompleted  = "completed"
	statusProgress   = "in_progress"
	statusIncomplete = "incomplete" // of a response, and of the item the token limit cut
)

// responsesEncoder renders one response. It is used by one request.
type responsesEncoder struct {
	base   responseObject // what every rendering of the response repeats
	calls  *toolcall.Parser
	newID  func(prefix string) string
	now    func() time.Time
	finish func(res engine.Result, obj *responseObject) // stores the response
	seq    int
	output []outputItem
	text   strings.Builder // the open message item's text
	open   int             // index of the open item, -1 for none
	names  toolNames       // the namespaces' functions, by the names the model calls
	// started: response.created and response.in_progress are out
	started bool
}

var (
	_ core.Encoder = (*responsesEncoder)(nil)
	_ core.Opener  = (*responsesEncoder)(nil)
)

// newResponsesEncoder is the encoder of rt's answer, which it stores when
// rt asks to.
func (s *server) newResponsesEncoder(c *gin.Context, t *core.Turn, rt *responseTurn) *responsesEncoder {
	b := &rt.body
	e := &responsesEncoder{base: echo(rt, s.Now().Unix()), newID: s.NewID, now: s.Now, open: -1, names: rt.names}
	if rt.tools.Call {
		single := b.ParallelToolCalls != nil && !*b.ParallelToolCalls
		e.calls = &toolcall.Parser{NewID: func() string { return s.NewID("call_") }, Single: single}
	}
	e.finish = func(res engine.Result, obj *responseObject) { s.keep(c, t, rt, res, obj) }
	return e
}

// echo is the response object's echo of the request.
func echo(rt *responseTurn, created int64) responseObject {
	b := &rt.body
	o := responseObject{ID: rt.id, Object: objectResponse, CreatedAt: created, Status: statusProgress,
		Instructions: b.Instructions, MaxOutputTokens: b.MaxOutputTokens, Model: rt.info.Model, Output: []outputItem{},
		ParallelToolCalls: b.ParallelToolCalls == nil || *b.ParallelToolCalls, Store: rt.store,
		Temperature: rt.req.Sampling.Temperature, TopP: rt.req.Sampling.TopP, Truncation: b.Truncation,
		Text: responseText{Format: &responseFormat{Type: "text"}}, ToolChoice: b.ToolChoice, Tools: b.rawTools, Metadata: map[string]any{}}
	if o.Truncation == "" {
		o.Truncation = truncationAuto
	}
	if b.Text != nil && b.Text.Format != nil {
		o.Text = *b.Text
	}
	if len(o.ToolChoice) == 0 {
		o.ToolChoice = json.RawMessage(`"auto"`)
	}
	if emptyJSON(o.Tools) {
		o.Tools = json.RawMessage(`[]`)
	}
	for k, v := range b.Metadata {
		o.Metadata[k] = v
	}
	if rt.previous != "" {
		o.PreviousResponseID = &rt.previous
	}
	if b.PromptCacheKey != "" {
		o.PromptCacheKey = &b.PromptCacheKey
	}
	if b.User != "" {
		o.User = &b.User
	}
	return o
}

// EventName names the event's SSE "event:" line: its type, as OpenAI's
// stream sends it (clients that dispatch on the SSE event name need it).
func (ev streamEvent) EventName() string { return ev.Type }

func (e *responsesEncoder) event(ev streamEvent) streamEvent {
	ev.SequenceNumber = e.seq
	e.seq++
	return ev
}

func (e *responsesEncoder) snapshot() *responseObject {
	o := e.base
	o.Output = append([]outputItem{}, e.output...)
	return &o
}

// Whole renders the response of a finished generation.
func (e *responsesEncoder) Whole(res engine.Result) any {
	content, calls := res.Text, []toolcall.Call(nil)
	if e.calls != nil {
		got := e.calls.Feed(res.Text)
		content, calls = got.Content+e.calls.Flush().Content, e.calls.Calls
	}
	if len(calls) == 0 || strings.TrimSpace(content) != "" {
		e.output = append(e.output, e.messageItem(content, statusCompleted))
	}
	for _, c := range calls {
		e.output = append(e.output, e.callItem(e.newID("fc_"), c, statusCompleted))
	}
	e.output[len(e.output)-1].Status = lastStatus(res)
	return e.done(res)
}

// done is the finished response, stored.
func (e *responsesEncoder) done(res engine.Result) *responseObject {
	o := e.snapshot()
	o.Status = statusCompleted
	if core.FinishReason(res) == engine.FinishLength {
		o.Status, o.IncompleteDetails = statusIncomplete, &incompleteDetails{Reason: "max_output_tokens"}
	}
	t := res.Timings
	out := core.OutputTokens(res)
	o.Usage = &responseUsage{InputTokens: t.PromptTokens, InputTokensDetails: inputTokensDetails{CachedTokens: t.CachedTokens},
		OutputTokens: out, TotalTokens: t.PromptTokens + out}
	completed := e.now().Unix()
	o.CompletedAt = &completed
	e.finish(res, o)
	return o
}

func (e *responsesEncoder) messageItem(text, status string) outputItem {
	parts := []outputText{}
	if status != statusProgress {
		parts = []outputText{{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}
	}
	return outputItem{Type: itemMessage, ID: e.newID("msg_"), Status: status, Role: engine.RoleAssistant, Content: &parts}
}

// callItem is a call as a function_call item: a namespace's function
// under its own name and its namespace's.
func (e *responsesEncoder) callItem(id string, c toolcall.Call, status string) outputItem {
	args := c.Function.Arguments
	q := e.names[c.Function.Name]
	if q.name == "" {
		q.name = c.Function.Name
	}
	return outputItem{Type: itemFunctionCall, ID: id, Status: status, CallID: c.ID, Name: q.name, Namespace: q.namespace, Arguments: &args}
}

// Opening renders response.created and response.in_progress, sent once
// the backend accepted the request.
func (e *responsesEncoder) Opening() []any {
	e.started = true
	return []any{e.event(streamEvent{Type: evCreated, Response: e.snapshot()}), e.event(streamEvent{Type: evInProgress, Response: e.snapshot()})}
}

// Open renders the first event's text, after the opening events if they
// are not out yet.
func (e *responsesEncoder) Open(ev engine.Event) []any {
	var out []any
	if !e.started {
		out = e.Opening()
	}
	if ev.Text != "" {
		out = append(out, e.Text(ev.Text)...)
	}
	return out
}

// Text renders streamed text: deltas of the message item, or of calls.
func (e *responsesEncoder) Text(s string) []any {
	if e.calls == nil {
		return e.textDelta(s)
	}
	got := e.calls.Feed(s)
	out := e.textDelta(got.Content)
	for _, d := range got.Deltas {
		if d.ID != "" {
			out = append(out, e.closeItem(statusCompleted)...)
			c := e.calls.Calls[d.Index]
			c.Function.Arguments = ""
			e.output = append(e.output, e.callItem(e.newID("fc_"), c, statusProgress))
			e.open = len(e.output) - 1
			item := e.output[e.open]
			out = append(out, e.event(streamEvent{Type: evItemAdded, OutputIndex: intp(e.open), Item: &item}))
		}
		if d.Function != nil && d.Function.Arguments != "" && e.open >= 0 {
			frag := d.Function.Arguments
			it := &e.output[e.open]
			*it.Arguments += frag
			out = append(out, e.event(streamEvent{Type: evArgsDelta, ItemID: it.ID, OutputIndex: intp(e.open), Delta: &frag}))
		}
	}
	return out
}

// textDelta renders text of the message item, opening one if none is.
func (e *responsesEncoder) textDelta(s string) []any {
	if s == "" {
		return nil
	}
	var out []any
	if e.open < 0 || e.output[e.open].Type != itemMessage {
		out = append(out, e.closeItem(statusCompleted)...)
		e.output = append(e.output, e.messageItem("", statusProgress))
		e.open = len(e.output) - 1
		item := e.output[e.open]
		out = append(out,
			e.event(streamEvent{Type: evItemAdded, OutputIndex: intp(e.open), Item: &item}),
			e.event(streamEvent{Type: evPartAdded, ItemID: item.ID, OutputIndex: intp(e.open), ContentIndex: intp(0),
				Part: &outputText{Type: "output_text", Text: "", Annotations: []any{}}}))
		e.text.Reset()
	}
	e.text.WriteString(s)
	return append(out, e.event(streamEvent{Type: evTextDelta, ItemID: e.output[e.open].ID, OutputIndex: intp(e.open),
		ContentIndex: intp(0), Delta: &s, Logprobs: json.RawMessage(`[]`)}))
}

// lastStatus is the status of a finished generation's last item: the
// token limit cut it (incomplete, as OpenAI marks it), or it is whole.
func lastStatus(res engine.Result) string {
	if core.FinishReason(res) == engine.FinishLength {
		return statusIncomplete
	}
	return statusCompleted
}

// closeItem renders the end of the open item, if any, with status: the
// next item began (completed), or the generation ended (lastStatus).
func (e *responsesEncoder) closeItem(status string) []any {
	if e.open < 0 {
		return nil
	}
	i := e.open
	e.open = -1
	it := &e.output[i]
	it.Status = status
	if it.Type == itemFunctionCall {
		args := *it.Arguments
		item := *it
		return []any{e.event(streamEvent{Type: evArgsDone, ItemID: it.ID, OutputIndex: intp(i), Arguments: &args}),
			e.event(streamEvent{Type: evItemDone, OutputIndex: intp(i), Item: &item})}
	}
	text := e.text.String()
	part := outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
	it.Content = &[]outputText{part}
	item := *it
	return []any{
		e.event(streamEvent{Type: evTextDone, ItemID: it.ID, OutputIndex: intp(i), ContentIndex: intp(0), Text: &text, Logprobs: json.RawMessage(`[]`)}),
		e.event(streamEvent{Type: evPartDone, ItemID: it.ID, OutputIndex: intp(i), ContentIndex: intp(0), Part: &part}),
		e.event(streamEvent{Type: evItemDone, OutputIndex: intp(i), Item: &item}),
	}
}

// End closes the open item and renders response.completed (or
// response.incomplete), after storing the response.
func (e *responsesEncoder) End(res engine.Result) []any {
	var out []any
	if e.calls != nil {
		out = append(out, e.textDelta(e.calls.Flush().Content)...)
	}
	if len(e.output) == 0 { // nothing generated: an empty message, as Whole renders it
		out = append(out, e.textDelta("")...)
		e.output = append(e.output, e.messageItem("", statusProgress))
		e.open = len(e.output) - 1
		e.text.Reset()
	}
	out = append(out, e.closeItem(lastStatus(res))...)
	o := e.done(res)
	typ := evCompleted
	if o.Status != statusCompleted {
		typ = evIncomplete
	}
	return append(out, e.event(streamEvent{Type: typ, Response: o}))
}

// StreamError renders response.failed with the error.
func (e *responsesEncoder) StreamError(err error) any {
	_, body := core.Classify(err)
	o := e.snapshot()
	o.Status, o.Error = "failed", &responseError{Code: body.Code, Message: body.Message}
	return e.event(streamEvent{Type: evFailed, Response: o})
}

func intp(i int) *int { return &i }
