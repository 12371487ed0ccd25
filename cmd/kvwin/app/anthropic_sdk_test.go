package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// These tests drive a real kvwin serve (the embedded engine, the test
// model), and a gateway over kvwin nodes, with Anthropic's official Go SDK
// through the Messages API, as a client application would.

// anthropicClient talks to a with key sent as x-api-key (the SDK's
// WithAPIKey), or none.
func anthropicClient(a *app.App, opts ...option.RequestOption) anthropic.Client {
	base := []option.RequestOption{option.WithBaseURL(a.URL() + "/"), option.WithAPIKey("unused"), option.WithMaxRetries(0)}
	return anthropic.NewClient(append(base, opts...)...)
}

// anthropicGreedy sends temperature 0: the v2 SDK has no sampling fields (the API
// deprecated them), but the wire still carries them.
var anthropicGreedy = option.WithJSONSet("temperature", 0)

// greeting is a plain request.
func greeting(maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "kvwin-tiny",
		MaxTokens: maxTokens,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}, {Text: "Answer in English."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello! Tell me about the sea."))},
	}
}

// textOf is a message's text blocks.
func textOf(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// streamed runs params streamed and accumulates the message, counting the
// events by type.
func streamed(t *testing.T, client anthropic.Client, params anthropic.MessageNewParams) (anthropic.Message, map[string]int) {
	t.Helper()
	stream := client.Messages.NewStreaming(context.Background(), params, anthropicGreedy)
	var msg anthropic.Message
	events := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		events[ev.Type]++
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return msg, events
}

func TestAnthropicSDKMessagesStreamedAndNot(t *testing.T) {
	a := apptest.Start(t, nil)
	client := anthropicClient(a)
	ctx := context.Background()

	whole, err := client.Messages.New(ctx, greeting(24), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(whole.ID, "msg_") || whole.Role != "assistant" || whole.StopReason != "max_tokens" || whole.Usage.OutputTokens != 24 {
		t.Fatalf("message %s", whole.RawJSON())
	}
	if whole.Usage.CacheCreationInputTokens != 0 || whole.Usage.InputTokens == 0 {
		t.Fatalf("usage %+v", whole.Usage)
	}
	var resp *http.Response
	again, err := client.Messages.New(ctx, greeting(24), anthropicGreedy, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	if h.Get("X-Kvwin-Cached-Tokens") != strconv.FormatInt(again.Usage.CacheReadInputTokens, 10) || !strings.HasPrefix(h.Get("X-Kvwin-Window"), "policy=full;") ||
		h.Get("X-Kvwin-Backend") == "" || h.Get("request-id") != h.Get("X-Request-Id") {
		t.Errorf("headers %v, usage %+v", h, again.Usage)
	}
	t.Logf("usage: first %s, repeated %s", whole.Usage.RawJSON(), again.Usage.RawJSON())
	msg, events := streamed(t, client, greeting(24))
	if textOf(&msg) != textOf(whole) || msg.StopReason != whole.StopReason || msg.Usage.OutputTokens != 24 {
		t.Fatalf("streamed %q (%s, %d tokens), whole %q", textOf(&msg), msg.StopReason, msg.Usage.OutputTokens, textOf(whole))
	}
	for _, typ := range []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"} {
		if events[typ] == 0 {
			t.Errorf("no %s event in %v", typ, events)
		}
	}
	// The same prompt again reuses its prefix: input_tokens count only
	// what was computed, and the two add up to the prompt.
	if msg.Usage.CacheReadInputTokens == 0 || msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens != whole.Usage.InputTokens+whole.Usage.CacheReadInputTokens {
		t.Errorf("repeated prefix: streamed usage %+v, first %+v", msg.Usage, whole.Usage)
	}

	// A stop sequence from the greedy answer ends it there, named.
	text := textOf(whole)
	stop := text[6:9]
	p := greeting(24)
	p.StopSequences = []string{stop}
	cut, err := client.Messages.New(ctx, p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if cut.StopReason != "stop_sequence" || cut.StopSequence != stop || textOf(cut) != text[:strings.Index(text, stop)] {
		t.Errorf("stop %q: %s %q, text %q of %q", stop, cut.StopReason, cut.StopSequence, textOf(cut), text)
	}
}

// weatherTool is the tool of weatherSchema (openai_sdk_test.go).
func weatherTool() anthropic.ToolUnionParam {
	props := weatherSchema["properties"]
	return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name: "get_weather", Description: anthropic.String("Current weather of a city"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: props, Required: []string{"city", "unit"},
			ExtraFields: map[string]any{"additionalProperties": false}},
	}}
}

func anthropicWeatherCall() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:      "kvwin-tiny",
		MaxTokens:  128, // the shortest call takes 88 tokens on the byte-level test model, the longest 100: room to finish it
		Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))},
		Tools:      []anthropic.ToolUnionParam{weatherTool()},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "get_weather"}},
	}
}

func TestAnthropicSDKForcedToolUseAndItsResult(t *testing.T) {
	a := apptest.Start(t, nil)
	client := anthropicClient(a)
	ctx := context.Background()

	res, err := client.Messages.New(ctx, anthropicWeatherCall(), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "tool_use" || len(res.Content) == 0 {
		t.Fatalf("stop %q: %s", res.StopReason, res.RawJSON())
	}
	call := res.Content[len(res.Content)-1]
	if call.Type != "tool_use" || call.Name != "get_weather" || !strings.HasPrefix(call.ID, "toolu_") {
		t.Fatalf("last block %s", call.RawJSON())
	}
	weatherArgs(t, string(call.Input))

	// Streamed, the input arrives as input_json_delta fragments that add
	// up to the same input (greedy under the grammar).
	msg, events := streamed(t, client, anthropicWeatherCall())
	scall := msg.Content[len(msg.Content)-1]
	if events["content_block_delta"] < 3 || scall.Type != "tool_use" || msg.StopReason != "tool_use" {
		t.Fatalf("streamed %v: %s", events, msg.RawJSON())
	}
	if !sameJSON(t, scall.Input, call.Input) {
		t.Errorf("streamed input %s, whole %s", scall.Input, call.Input)
	}

	// The result goes back in a user turn and is rendered; an error
	// result is marked so, which the byte-level model counts per byte.
	follow := func(isError bool) int64 {
		p := anthropicWeatherCall()
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
		p.MaxTokens = 8
		p.Messages = append(p.Messages, res.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "18 C", isError)))
		r, err := client.Messages.New(ctx, p, anthropicGreedy)
		if err != nil {
			t.Fatal(err)
		}
		return r.Usage.InputTokens + r.Usage.CacheReadInputTokens
	}
	ok, failed := follow(false), follow(true)
	if failed-ok != int64(len("Error: ")) || ok <= res.Usage.InputTokens+res.Usage.CacheReadInputTokens {
		t.Errorf("tool result turn: %d tokens, %d as an error; first turn %d", ok, failed, res.Usage.InputTokens+res.Usage.CacheReadInputTokens)
	}
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func TestAnthropicSDKCountTokensAndErrors(t *testing.T) {
	a := apptest.Start(t, nil)
	// Authorization: Bearer, as the SDK's WithAuthToken (Claude Code's
	// ANTHROPIC_AUTH_TOKEN) sends the key.
	client := anthropic.NewClient(option.WithBaseURL(a.URL()+"/"), option.WithAuthToken("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropicWeatherCall()
	params.System = []anthropic.TextBlockParam{{Text: "You report the weather."}}
	counted, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: params.Model, Messages: params.Messages, Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: weatherTool().OfTool}},
		ToolChoice: params.ToolChoice, System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Messages.New(ctx, params, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("count_tokens %d; the turn's usage %s", counted.InputTokens, res.Usage.RawJSON())
	if got := res.Usage.InputTokens + res.Usage.CacheReadInputTokens; counted.InputTokens != got || got == 0 {
		t.Errorf("count_tokens %d, the turn's input_tokens + cache_read_input_tokens %d", counted.InputTokens, got)
	}

	bad := greeting(8)
	bad.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))}
	_, err = client.Messages.New(ctx, bad, anthropicGreedy)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type() != anthropic.ErrorTypeInvalidRequestError || !strings.Contains(apiErr.Message, "images are not supported") {
		t.Fatalf("an image: %v, want the SDK's 400 invalid_request_error naming images", err)
	}
	_, err = client.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8, Messages: greeting(8).Messages}, anthropicGreedy)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type() != anthropic.ErrorTypeNotFoundError {
		t.Fatalf("another model: %v, want a 404 not_found_error", err)
	}

	page, err := client.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "kvwin-tiny" {
		t.Fatalf("models: %v %+v", err, page)
	}
}

// Keys come as x-api-key (or Bearer, above); each tenant reuses only its
// own prefixes, so cached tokens tell bob nothing of alice's prompt.
func TestAnthropicSDKKeysAndTenants(t *testing.T) {
	a := apptest.Start(t, withKeys)
	ctx := context.Background()
	alice := anthropicClient(a, option.WithAPIKey(aliceKey))
	bob := anthropicClient(a, option.WithAPIKey(bobKey))
	cached := func(c anthropic.Client) int64 {
		t.Helper()
		r, err := c.Messages.New(ctx, greeting(4), anthropicGreedy)
		if err != nil {
			t.Fatal(err)
		}
		return r.Usage.CacheReadInputTokens
	}
	if first, again := cached(alice), cached(alice); first != 0 || again == 0 {
		t.Fatalf("alice: %d then %d cached tokens; want 0, then a reused prefix", first, again)
	}
	if first, again := cached(bob), cached(bob); first != 0 || again == 0 {
		t.Fatalf("bob after alice: %d then %d cached tokens; want 0 (none of alice's), then his own", first, again)
	}
	stranger := anthropicClient(a, option.WithAPIKey("not-a-key-of-this-server"))
	_, err := stranger.Messages.New(ctx, greeting(4), anthropicGreedy)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Type() != anthropic.ErrorTypeAuthenticationError {
		t.Fatalf("a wrong key: %v, want 401 authentication_error", err)
	}
}

// Through a gateway over a kvwin node the Messages API answers as the
// node does: the same greedy text, tool input, stop sequence and count.
func TestAnthropicSDKThroughAGateway(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 1, "prefix")
	ctx := context.Background()
	viaGateway, direct := anthropicClient(gw), anthropicClient(nodes[0])
	first, err := direct.Messages.New(ctx, greeting(24), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		params anthropic.MessageNewParams
	}{
		{"text", greeting(24)},
		{"forced tool", anthropicWeatherCall()},
		{"stop sequence", func() anthropic.MessageNewParams {
			p := greeting(24)
			p.StopSequences = []string{textOf(first)[6:9]}
			return p
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := direct.Messages.New(ctx, c.params, anthropicGreedy)
			if err != nil {
				t.Fatal(err)
			}
			got, err := viaGateway.Messages.New(ctx, c.params, anthropicGreedy)
			if err != nil {
				t.Fatal(err)
			}
			blocks := func(m *anthropic.Message) string {
				var b strings.Builder
				for _, blk := range m.Content {
					b.WriteString(blk.Type + ":" + blk.Text + blk.Name + string(blk.Input) + "|")
				}
				return b.String()
			}
			if c.name == "stop sequence" && want.StopReason != "stop_sequence" {
				t.Errorf("the node's stop reason %q, want stop_sequence", want.StopReason)
			}
			if blocks(got) != blocks(want) || got.StopReason != want.StopReason || got.StopSequence != want.StopSequence ||
				got.Usage.InputTokens+got.Usage.CacheReadInputTokens != want.Usage.InputTokens+want.Usage.CacheReadInputTokens {
				t.Errorf("gateway %s\nnode    %s", got.RawJSON(), want.RawJSON())
			}
			s, _ := streamed(t, viaGateway, c.params)
			if blocks(&s) != blocks(want) && c.name != "forced tool" { // a streamed input keeps the model's spacing
				t.Errorf("streamed through the gateway %s\nnode %s", s.RawJSON(), want.RawJSON())
			}
		})
	}
	n, err := viaGateway.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "kvwin-tiny", Messages: greeting(1).Messages})
	m, err2 := direct.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "kvwin-tiny", Messages: greeting(1).Messages})
	if err != nil || err2 != nil || n.InputTokens != m.InputTokens || n.InputTokens == 0 {
		t.Errorf("count_tokens: gateway %v %v, node %v %v", n, err, m, err2)
	}
}

// A conversation sent through the Messages API is the chat it translates
// to: through chat completions the same system prompt and message are the
// same prompt, the same greedy answer, and reuse the KV the Messages turn
// computed.
func TestAnthropicMessagesIsTheSameChat(t *testing.T) {
	a := apptest.Start(t, nil)
	client := anthropicClient(a)
	msg, err := client.Messages.New(context.Background(), greeting(24), anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	chat := apptest.Post(t, a, map[string]any{"model": "kvwin-tiny", "max_tokens": 24, "temperature": 0,
		"messages": apptest.Msgs("system", "You are terse.\n\nAnswer in English.", "user", "Hello! Tell me about the sea.")})
	prompt := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens
	t.Logf("messages: %d prompt tokens; the same chat: %d, %d of them cached", prompt, chat.Prompt, chat.Cached)
	if chat.Status != 200 || chat.Content != textOf(msg) || int64(chat.Prompt) != prompt || chat.Cached < int(prompt)-16 {
		t.Fatalf("chat: %d %q, %d prompt tokens, %d cached; messages: %q, %d prompt tokens", chat.Status, chat.Content, chat.Prompt, chat.Cached, textOf(msg), prompt)
	}
}
