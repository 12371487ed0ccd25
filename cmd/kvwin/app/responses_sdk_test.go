package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// These tests drive a real kvwin serve (the embedded engine, the test
// model) with OpenAI's official Go SDK (v3) through the Responses API.

func responsesClient(base, key string) oai.Client {
	return oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: oai.String(s)}
}

// greedy is a short greedy answer to input.
func greedy(input string, n int64) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "kvwin-tiny", Input: textInput(input), Instructions: oai.String("Answer briefly."),
		MaxOutputTokens: oai.Int(n), Temperature: oai.Float(0)}
}

// streamResponse runs a streamed response and returns its completed
// response, the text its deltas add up to and the event types in order.
func streamResponse(t *testing.T, client oai.Client, params responses.ResponseNewParams) (*responses.Response, string, []string) {
	t.Helper()
	stream := client.Responses.NewStreaming(context.Background(), params)
	var (
		final  *responses.Response
		text   strings.Builder
		types  []string
		seq    int64 = -1
		args         = map[string]string{} // item id → arguments streamed
		argsOf       = map[string]string{} // item id → arguments done
	)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq+1 {
			t.Fatalf("event %s has sequence_number %d after %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.done":
			argsOf[ev.ItemID] = ev.Arguments
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for id, a := range argsOf {
		if args[id] != a {
			t.Fatalf("call %s: deltas add up to %q, done says %q", id, args[id], a)
		}
	}
	if final == nil {
		t.Fatalf("stream ended without response.completed: %v", types)
	}
	return final, text.String(), types
}

func TestResponsesStreamedAndNotGiveTheSameText(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	var httpRes *http.Response
	whole, err := client.Responses.New(context.Background(), greedy("Say something about caches.", 24), option.WithResponseInto(&httpRes))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(whole.ID, "resp_") || whole.Status != "incomplete" && whole.Status != "completed" || whole.Usage.InputTokens == 0 || whole.Usage.OutputTokens == 0 {
		t.Fatalf("response %s status %s usage %+v", whole.ID, whole.Status, whole.Usage)
	}
	if whole.Status == "incomplete" && whole.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("incomplete for %q", whole.IncompleteDetails.Reason)
	}
	for _, h := range []string{"X-Kvwin-Backend", "X-Kvwin-Prompt-Tokens", "X-Kvwin-Cached-Tokens", "X-Kvwin-Window"} {
		if httpRes.Header.Get(h) == "" {
			t.Fatalf("no %s header", h)
		}
	}
	streamed, text, types := streamResponse(t, client, greedy("Say something about caches.", 24))
	if text != whole.OutputText() || streamed.OutputText() != text || text == "" {
		t.Fatalf("streamed %q (completed says %q), whole %q", text, streamed.OutputText(), whole.OutputText())
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	if strings.Join(types[:4], " ") != strings.Join(want, " ") || types[len(types)-1] != "response.completed" && types[len(types)-1] != "response.incomplete" {
		t.Fatalf("events %v", types)
	}
	for _, ty := range []string{"response.output_text.done", "response.content_part.done", "response.output_item.done"} {
		if !contains(types, ty) {
			t.Fatalf("no %s in %v", ty, types)
		}
	}
	if streamed.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("the repeated prompt reused nothing: %+v", streamed.Usage)
	}
	got, err := client.Responses.Get(context.Background(), whole.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != whole.OutputText() || got.ID != whole.ID {
		t.Fatalf("retrieve: %v %+v", err, got)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func weatherResponse(stream bool) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: "kvwin-tiny", MaxOutputTokens: oai.Int(128), Input: textInput("What is the weather in Paris?"),
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
			Name: "get_weather", Description: oai.String("Current weather of a city"), Parameters: weatherSchema, Strict: oai.Bool(true),
		}}},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
	}
}

func TestResponsesForcedFunctionCallRoundTrip(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	ctx := context.Background()
	res, err := client.Responses.New(ctx, weatherResponse(false))
	if err != nil {
		t.Fatal(err)
	}
	var call responses.ResponseFunctionToolCall
	for _, it := range res.Output {
		if it.Type == "function_call" {
			call = it.AsFunctionCall()
		}
	}
	if call.Name != "get_weather" || !strings.HasPrefix(call.CallID, "call_") || !strings.HasPrefix(call.ID, "fc_") {
		t.Fatalf("output %+v: want a get_weather call", res.Output)
	}
	weatherArgs(t, call.Arguments)

	// Streamed, the arguments come in fragments that add up to the call.
	streamed, _, types := streamResponse(t, client, weatherResponse(true))
	if !contains(types, "response.function_call_arguments.delta") || !contains(types, "response.function_call_arguments.done") {
		t.Fatalf("streamed call events %v", types)
	}
	for _, it := range streamed.Output {
		if it.Type == "function_call" {
			weatherArgs(t, it.AsFunctionCall().Arguments)
		}
	}

	// The call's output continues the stored conversation.
	next, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "kvwin-tiny", MaxOutputTokens: oai.Int(8), PreviousResponseID: oai.String(res.ID), Tools: weatherResponse(false).Tools,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			callOutput(call.CallID, `{"temperature": 18, "unit": "celsius"}`),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.PreviousResponseID != res.ID || next.Usage.InputTokens <= res.Usage.InputTokens || next.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("continuation: previous %q, usage %+v after %+v", next.PreviousResponseID, next.Usage, res.Usage)
	}
	items, err := client.Responses.InputItems.List(ctx, next.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 || items.Data[0].Type != "function_call_output" || items.Data[0].CallID != call.CallID {
		t.Fatalf("input items: %v %+v", err, items)
	}
	// And the same history sent whole, not stored, is served alike.
	whole, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "kvwin-tiny", MaxOutputTokens: oai.Int(8), Store: oai.Bool(false), Tools: weatherResponse(false).Tools,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			callOutput(call.CallID, `{"temperature": 18, "unit": "celsius"}`),
		}},
	})
	if err != nil || !strings.Contains(whole.RawJSON(), `"store":false`) {
		t.Fatalf("store false: %v, response %s", err, whole.RawJSON())
	}
	if _, err := client.Responses.Get(ctx, whole.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Fatalf("a response not stored was retrieved: %v", err)
	}
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	p := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	p.OfFunctionCallOutput.CallID = oai.String(callID)
	return p
}

func isStatus(err error, status int) bool {
	var apiErr *oai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == status
}

func TestResponsesJSONSchemaOutputValidates(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	schema := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"name": map[string]any{"type": "string", "maxLength": 10}, "age": map[string]any{"type": "integer"}},
		"required":             []string{"name", "age"},
		"additionalProperties": false,
	}
	res, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "kvwin-tiny", Input: textInput("Give a person."), MaxOutputTokens: oai.Int(64),
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigParamOfJSONSchema("person", schema)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(res.OutputText()), &got); err != nil {
		t.Fatalf("output %q is not JSON: %v", res.OutputText(), err)
	}
	name, ok := got["name"].(string)
	age, isNum := got["age"].(float64)
	if !ok || len([]rune(name)) > 10 || !isNum || age != float64(int64(age)) || len(got) != 2 {
		t.Fatalf("output %q does not validate", res.OutputText())
	}
	if res.Text.Format.Type != "json_schema" {
		t.Fatalf("text.format echoed as %+v", res.Text.Format)
	}
}

func TestResponsesBadRequests(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	ctx := context.Background()
	base := greedy("hi", 4)
	cases := []struct {
		name   string
		params responses.ResponseNewParams
		opts   []option.RequestOption
		status int
		param  string
	}{
		{"reasoning", base, []option.RequestOption{option.WithJSONSet("reasoning", map[string]any{"effort": "enormous"})}, 400, "reasoning.effort"},
		{"background", base, []option.RequestOption{option.WithJSONSet("background", true)}, 400, "background"},
		{"web search forced", base, []option.RequestOption{option.WithJSONSet("tools", []any{map[string]any{"type": "web_search"}}), option.WithJSONSet("tool_choice", map[string]any{"type": "web_search"})}, 400, "tool_choice"},
		{"include", base, []option.RequestOption{option.WithJSONSet("include", []string{"message.output_text.logprobs"})}, 400, "include[0]"},
		{"image input", base, []option.RequestOption{option.WithJSONSet("input", []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "http://x/y.png"}}}})}, 400, "input[0].content[0].type"},
		{"truncation", base, []option.RequestOption{option.WithJSONSet("truncation", "sometimes")}, 400, "truncation"},
		{"max_output_tokens", base, []option.RequestOption{option.WithJSONSet("max_output_tokens", -3)}, 400, "max_output_tokens"},
		{"unknown previous", base, []option.RequestOption{option.WithJSONSet("previous_response_id", "resp_nope")}, 404, ""},
		{"unknown model", base, []option.RequestOption{option.WithJSONSet("model", "gpt-9")}, 404, "model"},
		{"disabled truncation that does not fit", greedy(apptest.Words(3, 6000), 4), []option.RequestOption{option.WithJSONSet("truncation", "disabled")}, 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := client.Responses.New(ctx, c.params, c.opts...)
			var apiErr *oai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != c.status {
				t.Fatalf("err %v, want status %d", err, c.status)
			}
			if strings.HasPrefix(c.name, "disabled truncation") && apiErr.Code != "context_length_exceeded" {
				t.Fatalf("code %q, want context_length_exceeded", apiErr.Code)
			}
			if c.param != "" && apiErr.Param != c.param {
				t.Fatalf("param %q, want %q (%s)", apiErr.Param, c.param, apiErr.Message)
			}
		})
	}
}

func TestResponsesOfAnotherTenantAre404(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.APIKeys = []string{"alice=key-alice-0123456789", "bob=key-bob-0123456789"} })
	alice, bob := responsesClient(a.URL(), "key-alice-0123456789"), responsesClient(a.URL(), "key-bob-0123456789")
	ctx := context.Background()
	res, err := alice.Responses.New(ctx, greedy("Alice's secret is 77.", 4))
	if err != nil {
		t.Fatal(err)
	}
	_, getErr := bob.Responses.Get(ctx, res.ID, responses.ResponseGetParams{})
	_, contErr := bob.Responses.New(ctx, responses.ResponseNewParams{Model: "kvwin-tiny", Input: textInput("What is it?"), PreviousResponseID: oai.String(res.ID)})
	_, itemsErr := bob.Responses.InputItems.List(ctx, res.ID, responses.InputItemListParams{})
	delErr := bob.Responses.Delete(ctx, res.ID)
	for name, err := range map[string]error{"retrieve": getErr, "continue": contErr, "input items": itemsErr, "delete": delErr} {
		if !isStatus(err, 404) {
			t.Fatalf("bob's %s of alice's response: %v, want 404", name, err)
		}
	}
	// Alice still has it, and deletes it.
	if _, err := alice.Responses.Get(ctx, res.ID, responses.ResponseGetParams{}); err != nil {
		t.Fatal(err)
	}
	if err := alice.Responses.Delete(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Responses.Get(ctx, res.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Fatalf("deleted response retrieved: %v", err)
	}
}

// conversationTurn is turn i's message of the 40-turn conversation: chatter,
// with an early fact and, late, a question about it.
func conversationTurn(i int) string {
	switch i {
	case 1:
		return "Remember this: the vault code of Zephyrine is 4417."
	case 36, 41:
		return "What is the vault code of Zephyrine?"
	}
	return fmt.Sprintf("turn %d: %s", i, apptest.Words(i, 180))
}

// lastWindow is the window layout the server reports of its latest turn.
func lastWindow(t *testing.T, base string) map[string]int {
	t.Helper()
	res, err := http.Get(base + "/kvwin/v1/traffic")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Turns []struct {
			Window map[string]any `json:"window"`
		} `json:"turns"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || len(body.Turns) == 0 {
		t.Fatalf("traffic: %v", err)
	}
	out := map[string]int{}
	for k, v := range body.Turns[len(body.Turns)-1].Window {
		if n, ok := v.(float64); ok {
			out[k] = int(n)
		}
	}
	return out
}

// Forty turns through previous_response_id, each sending only its new
// message: between eviction steps every turn reuses all but its new input
// and packet, the early fact returns in a packet once evicted, and the
// chain goes on after a restart.
func TestResponsesFortyTurnConversationHeldByKvwin(t *testing.T) {
	f := apptest.Flags(t)
	f.Slots, f.Window, f.WindowBudget = 1, "memory", 2048
	a, stop := apptest.Run(t, f)
	defer func() { stop() }()
	client := responsesClient(a.URL(), "unused")
	ctx := context.Background()
	const instructions = "You are a terse assistant."
	send := func(base, prev string, i int) (*responses.Response, map[string]int, http.Header) {
		t.Helper()
		p := responses.ResponseNewParams{Model: "kvwin-tiny", Input: textInput(conversationTurn(i)), Instructions: oai.String(instructions),
			MaxOutputTokens: oai.Int(4), Temperature: oai.Float(0)}
		if prev != "" {
			p.PreviousResponseID = oai.String(prev)
		}
		var hr *http.Response
		res, err := client.Responses.New(ctx, p, option.WithResponseInto(&hr))
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		return res, lastWindow(t, base), hr.Header
	}
	var (
		first, prev          string
		prevStep, prevPacket int
		steps, checked       int
		shares               []string // cached/input per turn
		prevOut              int
	)
	for i := 0; i < 40; i++ {
		res, w, h := send(a.URL(), prev, i)
		if i == 0 {
			first = res.ID
		}
		step, packet := w["eviction_steps"], w["packet_tokens"]
		if h.Get("X-Kvwin-Window") == "" || res.PreviousResponseID != prev {
			t.Fatalf("turn %d: window header %q, previous %q", i, h.Get("X-Kvwin-Window"), res.PreviousResponseID)
		}
		// What cannot be reused: the new message and the last answer, each
		// with the chat template's framing (ChatML: <|im_start|>, the
		// role's bytes and a newline before, <|im_end|> and a newline
		// after; the byte-level test model has a token a byte), the
		// packet, and when the last turn had a packet, its ask too (the
		// packet rode before it).
		newTokens := len(conversationTurn(i)) + len("user") + 4 + prevOut + len("assistant") + 4
		if prevPacket > 0 {
			newTokens += len(conversationTurn(i-1)) + len("user") + 4
		}
		floor := int(res.Usage.InputTokens) - newTokens - packet - 16
		shares = append(shares, fmt.Sprintf("%d/%d", res.Usage.InputTokensDetails.CachedTokens, res.Usage.InputTokens))
		if i >= 2 && step == prevStep {
			checked++
			if cached := int(res.Usage.InputTokensDetails.CachedTokens); cached < floor {
				t.Fatalf("turn %d (no eviction step): cached %d of %d, want at least %d (packet %d)", i, cached, res.Usage.InputTokens, floor, packet)
			}
		}
		if step != prevStep {
			steps++
		}
		if i == 36 {
			if w["evicted_messages"] < 4 || w["packet_turns"] == 0 {
				t.Fatalf("turn 36: the fact was evicted (%d messages) but no packet brought it (%v)", w["evicted_messages"], w)
			}
		}
		prev, prevStep, prevPacket, prevOut = res.ID, step, packet, int(res.Usage.OutputTokens)
	}
	t.Logf("%d eviction steps, %d turns checked; cached/input per turn: %s", steps, checked, strings.Join(shares, " "))
	if steps == 0 || checked < 20 {
		t.Fatalf("%d eviction steps, %d turns checked: the conversation must outgrow the window", steps, checked)
	}

	// A restart: the chain is in the memory store.
	stop()
	a2, stop2 := apptest.Run(t, f)
	defer stop2()
	client = responsesClient(a2.URL(), "unused")
	res, w, _ := send(a2.URL(), prev, 41)
	if res.PreviousResponseID != prev || w["evicted_messages"] == 0 || w["packet_turns"] == 0 {
		t.Fatalf("after the restart: previous %q, window %v; want the chain with its evicted turns and the fact's packet", res.PreviousResponseID, w)
	}
	// The whole chain is one conversation, named by its first response.
	req, _ := http.NewRequest(http.MethodDelete, a2.URL()+"/kvwin/v1/conversations/"+first, nil)
	del, err := http.DefaultClient.Do(req)
	if err != nil || del.StatusCode != http.StatusNoContent {
		t.Fatalf("delete the conversation: %v %v", err, del.Status)
	}
	del.Body.Close()
	for _, id := range []string{first, prev, res.ID} {
		if _, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{}); !isStatus(err, 404) {
			t.Fatalf("response %s after its conversation was deleted: %v", id, err)
		}
	}
}

// Through a gateway over kvwin nodes the Responses API answers as on a
// node: the same greedy text, streamed or not, the same forced call, and a
// chain the gateway holds, continued with only the new input. One node:
// with two, a continuation this short (41 new tokens against 92 on the
// other node) is within the router's tie margin of either node, so its
// reuse would depend on the nodes' measured speeds, not on the chain.
func TestResponsesThroughAGatewayAnswerAsOnANode(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 1, "prefix")
	onGateway, onNode := responsesClient(gw.URL(), "unused"), responsesClient(nodes[0].URL(), "unused")
	ctx := context.Background()
	call := weatherResponse(false)
	call.Temperature = oai.Float(0)
	for _, c := range []struct {
		name   string
		params responses.ResponseNewParams
	}{{"text", greedy("Say something about caches.", 24)}, {"forced call", call}} {
		viaGateway, err := onGateway.Responses.New(ctx, c.params)
		if err != nil {
			t.Fatal(err)
		}
		viaNode, err := onNode.Responses.New(ctx, c.params)
		if err != nil {
			t.Fatal(err)
		}
		if viaGateway.OutputText() != viaNode.OutputText() || len(viaGateway.Output) != len(viaNode.Output) ||
			viaGateway.Usage.InputTokens != viaNode.Usage.InputTokens {
			t.Fatalf("%s: gateway %s, node %s", c.name, viaGateway.RawJSON(), viaNode.RawJSON())
		}
		for i := range viaNode.Output {
			g, n := viaGateway.Output[i], viaNode.Output[i]
			if g.Type != n.Type || g.Name != n.Name || g.Arguments.OfString != n.Arguments.OfString {
				t.Fatalf("%s: output %d differs: gateway %s, node %s", c.name, i, g.RawJSON(), n.RawJSON())
			}
		}
		streamed, text, _ := streamResponse(t, onGateway, c.params)
		if text != viaNode.OutputText() || len(streamed.Output) != len(viaNode.Output) {
			t.Fatalf("%s: streamed through the gateway %q, node %q", c.name, text, viaNode.OutputText())
		}
	}
	first, err := onGateway.Responses.New(ctx, greedy("Remember: the ferry leaves at nine.", 4))
	if err != nil {
		t.Fatal(err)
	}
	next, err := onGateway.Responses.New(ctx, responses.ResponseNewParams{Model: "kvwin-tiny", Input: textInput("When does it leave?"),
		Instructions: oai.String("Answer briefly."), MaxOutputTokens: oai.Int(4), PreviousResponseID: oai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if next.Usage.InputTokens <= first.Usage.InputTokens || next.Usage.InputTokensDetails.CachedTokens < first.Usage.InputTokens-16 {
		t.Fatalf("continued through the gateway: %+v after %d input tokens", next.Usage, first.Usage.InputTokens)
	}
	// The chain is the gateway's: a node never saw the response id.
	if _, err := onNode.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Fatalf("a node holds the gateway's response: %v", err)
	}
}

// lastConversation is the conversation the server's latest turn was served
// in.
func lastConversation(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/kvwin/v1/traffic")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Turns []struct {
			Conversation string `json:"conversation"`
		} `json:"turns"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || len(body.Turns) == 0 {
		t.Fatalf("traffic: %v", err)
	}
	return body.Turns[len(body.Turns)-1].Conversation
}

// Two responses continuing one are two branches: each continues with its
// own history only. A client that sends the whole input, not stored, is
// served in the conversation its prompt_cache_key names.
func TestResponsesBranchesAndUnstoredConversations(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	ctx := context.Background()
	next := func(prev, input string) *responses.Response {
		t.Helper()
		p := greedy(input, 4)
		if prev != "" {
			p.PreviousResponseID = oai.String(prev)
		}
		res, err := client.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	root := next("", "Let us plan a trip.")
	if conv := lastConversation(t, a.URL()); conv != root.ID {
		t.Fatalf("a new chain served in conversation %q, want its first response's id %q", conv, root.ID)
	}
	long := "Option B: " + apptest.Words(9, 400)
	short, wordy := next(root.ID, "Option A."), next(root.ID, long)
	if grew := wordy.Usage.InputTokens - root.Usage.InputTokens; grew < 400 {
		t.Fatalf("branch B grew the prompt by %d tokens, less than its message", grew)
	}
	afterA, afterB := next(short.ID, "And then?"), next(wordy.ID, "And then?")
	if grew := afterA.Usage.InputTokens - short.Usage.InputTokens; grew >= 100 {
		t.Fatalf("branch A's next turn grew by %d tokens: it holds branch B's message", grew)
	}
	if grew := afterB.Usage.InputTokens - wordy.Usage.InputTokens; grew >= 100 {
		t.Fatalf("branch B's next turn grew by %d tokens", grew)
	}
	if conv := lastConversation(t, a.URL()); conv != root.ID {
		t.Fatalf("a branch served in conversation %q, want the chain's %q", conv, root.ID)
	}
	p := greedy("The whole history, every turn.", 4)
	p.Store, p.PromptCacheKey = oai.Bool(false), oai.String("agent-7")
	if _, err := client.Responses.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if conv := lastConversation(t, a.URL()); conv != "agent-7" {
		t.Fatalf("store false with prompt_cache_key served in conversation %q", conv)
	}
	p.PromptCacheKey = oai.String("")
	if _, err := client.Responses.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if conv := lastConversation(t, a.URL()); conv != "" {
		t.Fatalf("store false without a key served in conversation %q, want none", conv)
	}
}

// A turn as Codex (0.171) sends it, in shape, streamed: reasoning with a
// summary, include of reasoning's encrypted content, store false, a
// developer message, a function, a namespace of functions and OpenAI's
// web_search among the tools. Each of these was once a 400, which refused
// the agent whole. A call of the namespace's function comes back under its
// own name and namespace, and the next turn, carrying it, a reasoning item
// of another model's and the call's output, reuses the first's prefix.
func TestResponsesAsCodexSendsThem(t *testing.T) {
	a := apptest.Start(t, nil)
	client := responsesClient(a.URL(), "unused")
	ctx := context.Background()
	tools := []any{
		map[string]any{"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []string{"cmd"}}},
		map[string]any{"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": []any{
			map[string]any{"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": false,
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}, "required": []string{"id"}, "additionalProperties": false}},
		}},
		map[string]any{"type": "web_search", "external_web_access": false},
	}
	codex := []option.RequestOption{
		option.WithJSONSet("tools", tools),
		option.WithJSONSet("reasoning", map[string]any{"summary": "auto"}),
		option.WithJSONSet("include", []string{"reasoning.encrypted_content"}),
		option.WithJSONSet("store", false),
		option.WithJSONSet("prompt_cache_key", "thread-1"),
		option.WithJSONSet("parallel_tool_calls", true),
		option.WithJSONSet("client_metadata", map[string]any{"x-codex-turn-metadata": `{"turn_id":"t1"}`}),
	}
	developer := responses.ResponseInputItemParamOfMessage("You are a coding agent.", responses.EasyInputMessageRoleDeveloper)
	user := responses.ResponseInputItemParamOfMessage("Close agent a1.", responses.EasyInputMessageRoleUser)
	params := responses.ResponseNewParams{Model: "kvwin-tiny", MaxOutputTokens: oai.Int(160), Temperature: oai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{developer, user}}}

	stream := client.Responses.NewStreaming(ctx, params, append(codex,
		option.WithJSONSet("tool_choice", map[string]any{"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"}))...)
	var done *responses.Response
	for stream.Next() {
		// The id is a free string the byte-level test model never ends:
		// the token limit closes the call, so the response is incomplete
		// (max_output_tokens), not completed, and still holds the call.
		if ev := stream.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			r := ev.Response
			done = &r
		}
	}
	if err := stream.Err(); err != nil || done == nil {
		t.Fatalf("stream: %v, completed %v", err, done != nil)
	}
	var call responses.ResponseFunctionToolCall
	for _, it := range done.Output {
		if it.Type == "function_call" {
			call = it.AsFunctionCall()
		}
	}
	if call.Name != "close_agent" || call.Namespace != "multi_agent_v1" || !json.Valid([]byte(call.Arguments)) {
		t.Fatalf("output %s: want a close_agent call in namespace multi_agent_v1", done.RawJSON())
	}
	if !strings.Contains(done.RawJSON(), `"type":"web_search"`) {
		t.Errorf("the response does not echo the tools as sent: %s", done.RawJSON())
	}

	fc := responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name)
	fc.OfFunctionCall.Namespace = oai.String(call.Namespace)
	reasoning := responses.ResponseInputItemUnionParam{OfReasoning: &responses.ResponseReasoningItemParam{ID: "rs_1",
		Summary: []responses.ResponseReasoningItemSummaryParam{}, EncryptedContent: oai.String("gAAAAB")}}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{developer, user, reasoning, fc,
		callOutput(call.CallID, `{"closed": true}`)}}
	params.MaxOutputTokens = oai.Int(8)
	next, err := client.Responses.New(ctx, params, codex...)
	if err != nil {
		t.Fatal(err)
	}
	if next.Usage.InputTokens <= done.Usage.InputTokens || next.Usage.InputTokensDetails.CachedTokens < done.Usage.InputTokens-8 {
		t.Fatalf("the next turn's usage %+v after %+v: want the first turn's prompt reused", next.Usage, done.Usage)
	}
}
