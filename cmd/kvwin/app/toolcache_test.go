package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// A tool loop stays cached: after a forced call, the client sends the
// history back with the call re-serialised as an SDK would (other key
// order, spacing and string escaping), plus the tool's result, and the
// server reuses every prompt token but the result's turn. Each API says
// it in its own shapes; the rule is the same (toolcall.Answers).

// toolResult is what the tool answered, in every test below.
const toolResult = "18 C, light rain"

// toolTurnTokens is the tool result's turn as the test model reads it:
// <|im_start|>, "user\n<tool_response>\n", the result, "\n</tool_response>",
// <|im_end|>, "\n" — one token per byte on the byte-level model, one per
// control token.
func toolTurnTokens() int {
	return 2 + len("user\n<tool_response>\n"+toolResult+"\n</tool_response>\n")
}

// reserialised is a call's arguments as a client might send them back:
// the same value with keys in reverse order, spaces around every colon
// and comma, and every space and non-ASCII character inside a string
// escaped as \uXXXX.
func reserialised(t *testing.T, args string) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("arguments %q: %v", args, err)
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var b strings.Builder
	b.WriteString("{ ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" , ")
		}
		key, _ := json.Marshal(k)
		val, _ := json.Marshal(v[k])
		fmt.Fprintf(&b, "%s : %s", escaped(string(key)), escaped(string(val)))
	}
	b.WriteString(" }")
	out := b.String()
	if out == args {
		t.Fatalf("re-serialising %q changed nothing", args)
	}
	return out
}

// escaped writes the spaces and non-ASCII characters of JSON text s as
// \u escapes (s holds no space outside its strings).
func escaped(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || r > 0x7e {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// posted is one non-streamed answer: its body and the tokens headers.
type posted struct {
	body           map[string]any
	prompt, cached int
	kept           int // the window's kept_tokens; -1 without a window
}

func postAPI(t *testing.T, base, path string, body map[string]any) posted {
	t.Helper()
	return postAs(t, base, path, "", body)
}

// postAs posts with an API key ("" for none).
func postAs(t *testing.T, base, path, key string, body map[string]any) posted {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p posted
	if err := json.NewDecoder(resp.Body).Decode(&p.body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d, %v: %v", path, resp.StatusCode, err, p.body)
	}
	p.prompt = apptest.Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens"))
	p.cached = apptest.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
	p.kept = -1
	if resp.Header.Get("X-Kvwin-Window") != "" {
		p.kept = apptest.Atoi(apptest.WindowHeader(t, resp.Header)["kept_tokens"])
	}
	return p
}

// fullyCached checks the turn after a call: every prompt token but the
// tool result's turn and 32 more came from the cache.
func fullyCached(t *testing.T, first, next posted) {
	t.Helper()
	t.Logf("turn after the call: %d of %d prompt tokens cached (the tool result's turn is %d)", next.cached, next.prompt, toolTurnTokens())
	if want := next.prompt - (toolTurnTokens() + 32); next.cached < want || next.prompt <= first.prompt {
		t.Errorf("turn after the call: %d of %d prompt tokens cached, want at least %d (first turn: %d prompt tokens)",
			next.cached, next.prompt, want, first.prompt)
	}
}

// jsonAt is the value at keys (object keys, or array indexes as ints).
func jsonAt(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func chatToolTurn(t *testing.T, base string) {
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Current weather of a city", "parameters": weatherSchema}}}
	ask := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	first := postAPI(t, base, "/v1/chat/completions", map[string]any{"model": "kvwin-tiny", "max_tokens": 128, "temperature": 0,
		"messages": []any{ask}, "tools": tools, "tool_choice": "required"})
	call, _ := jsonAt(first.body, "choices", 0, "message", "tool_calls", 0).(map[string]any)
	args, _ := jsonAt(call, "function", "arguments").(string)
	weatherArgs(t, args)
	next := func(args string) posted {
		sent := map[string]any{"id": call["id"], "type": "function", "function": map[string]any{"name": "get_weather", "arguments": args}}
		return postAPI(t, base, "/v1/chat/completions", map[string]any{"model": "kvwin-tiny", "max_tokens": 4, "temperature": 0, "tools": tools,
			"messages": []any{ask, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{sent}},
				map[string]any{"role": "tool", "tool_call_id": call["id"], "content": toolResult}}})
	}
	sent := next(reserialised(t, args))
	fullyCached(t, first, sent)
	// The window counted the history as it was sent: what it kept is the
	// prompt but for the generation prompt, as on the first turn.
	if sent.kept >= 0 && sent.prompt-sent.kept != first.prompt-first.kept {
		t.Errorf("the window kept %d of a %d-token prompt; the first turn %d of %d", sent.kept, sent.prompt, first.kept, first.prompt)
	}
	if got := metric(t, base, "kvwin_tool_answers_recalled_total"); got != "1" {
		t.Errorf("kvwin_tool_answers_recalled_total %q, want 1", got)
	}

	// A call the model did not make is not taken for the one it made:
	// the prompt diverges inside the call.
	var v map[string]any
	_ = json.Unmarshal([]byte(args), &v)
	v["city"] = v["city"].(string) + "x"
	other, _ := json.Marshal(v)
	if got := next(string(other)); got.cached > first.prompt+len(`<tool_call>`+"\n"+`{"name":"get_weather","arguments":{"city":"`)+len(v["city"].(string)) {
		t.Errorf("a changed call: %d of %d prompt tokens cached, more than the first turn's %d and the call up to the change",
			got.cached, got.prompt, first.prompt)
	}
}

// Another tenant sending the same history gets the call rendered as it
// sent it: neither the text another tenant's model wrote nor its KV.
func TestToolLoopAnswersAreTheTenantsOwn(t *testing.T) {
	base := apptest.Start(t, func(f *app.Config) { f.APIKeys = []string{"alice=" + aliceKey, "bob=" + bobKey} }).URL()
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": weatherSchema}}}
	ask := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	first := postAs(t, base, "/v1/chat/completions", aliceKey, map[string]any{"model": "kvwin-tiny", "max_tokens": 128, "temperature": 0,
		"messages": []any{ask}, "tools": tools, "tool_choice": "required"})
	call, _ := jsonAt(first.body, "choices", 0, "message", "tool_calls", 0).(map[string]any)
	args, _ := jsonAt(call, "function", "arguments").(string)
	sent := map[string]any{"id": call["id"], "type": "function", "function": map[string]any{"name": "get_weather", "arguments": reserialised(t, args)}}
	next := map[string]any{"model": "kvwin-tiny", "max_tokens": 4, "temperature": 0, "tools": tools,
		"messages": []any{ask, map[string]any{"role": "assistant", "tool_calls": []any{sent}},
			map[string]any{"role": "tool", "tool_call_id": call["id"], "content": toolResult}}}
	bob := postAs(t, base, "/v1/chat/completions", bobKey, next)
	alice := postAs(t, base, "/v1/chat/completions", aliceKey, next)
	fullyCached(t, first, alice)
	// The re-serialised arguments are longer than the model's compact ones.
	if bob.cached != 0 || bob.prompt <= alice.prompt {
		t.Errorf("bob: %d of %d prompt tokens cached; alice: %d of %d; want none for bob, and his call as he sent it",
			bob.cached, bob.prompt, alice.cached, alice.prompt)
	}
}

// Under every window policy: the answer is recalled after the cut.
func TestToolLoopCachedChatCompletions(t *testing.T) {
	for _, policy := range []string{"full", "memory"} {
		t.Run(policy, func(t *testing.T) {
			chatToolTurn(t, apptest.Start(t, func(f *app.Config) { f.Window = policy }).URL())
		})
	}
}

func TestToolLoopCachedThroughAGateway(t *testing.T) {
	gw, _ := apptest.StartFleet(t, 1, "prefix")
	chatToolTurn(t, gw.URL())
}

// Streamed or not, the answer is remembered: agents stream.
func TestToolLoopCachedAnthropicMessages(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream %v", stream), func(t *testing.T) { anthropicToolTurn(t, stream) })
	}
}

func anthropicToolTurn(t *testing.T, stream bool) {
	base := apptest.Start(t, nil).URL()
	tools := []any{map[string]any{"name": "get_weather", "description": "Current weather of a city", "input_schema": weatherSchema}}
	ask := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	body := map[string]any{"model": "kvwin-tiny", "max_tokens": 128, "temperature": 0,
		"messages": []any{ask}, "tools": tools, "tool_choice": map[string]any{"type": "tool", "name": "get_weather"}}
	var first posted
	var use map[string]any
	if stream {
		use = streamedToolUse(t, base, body)
	} else {
		first = postAPI(t, base, "/v1/messages", body)
		use, _ = jsonAt(first.body, "content", 0).(map[string]any)
	}
	input, _ := json.Marshal(use["input"])
	if use["type"] != "tool_use" {
		t.Fatalf("first answer %v: want a tool_use", use)
	}
	weatherArgs(t, string(input))
	sent := map[string]any{"type": "tool_use", "id": use["id"], "name": use["name"], "input": json.RawMessage(reserialised(t, string(input)))}
	next := postAPI(t, base, "/v1/messages", map[string]any{"model": "kvwin-tiny", "max_tokens": 4, "temperature": 0, "tools": tools,
		"messages": []any{ask, map[string]any{"role": "assistant", "content": []any{sent}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": toolResult}}}}})
	fullyCached(t, first, next)
}

// streamedToolUse streams a Messages request and returns its tool_use
// block as a client assembles it: the block's start, then its input's
// partial_json fragments.
func streamedToolUse(t *testing.T, base string, body map[string]any) map[string]any {
	t.Helper()
	body["stream"] = true
	b, _ := json.Marshal(body)
	resp, err := http.Post(base+"/v1/messages", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var use map[string]any
	var input strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if block, _ := ev["content_block"].(map[string]any); ev["type"] == "content_block_start" && block["type"] == "tool_use" {
			use = block
		}
		if frag, ok := jsonAt(ev, "delta", "partial_json").(string); ok {
			input.WriteString(frag)
		}
	}
	if use == nil {
		t.Fatal("no tool_use block streamed")
	}
	use["input"] = json.RawMessage(input.String())
	return use
}

func TestToolLoopCachedResponses(t *testing.T) {
	base := apptest.Start(t, nil).URL()
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "description": "Current weather of a city", "parameters": weatherSchema}}
	ask := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	first := postAPI(t, base, "/v1/responses", map[string]any{"model": "kvwin-tiny", "max_output_tokens": 128, "temperature": 0, "store": false,
		"input": []any{ask}, "tools": tools, "tool_choice": map[string]any{"type": "function", "name": "get_weather"}})
	var call map[string]any
	for _, it := range jsonAt(first.body, "output").([]any) {
		if it, _ := it.(map[string]any); it["type"] == "function_call" {
			call = it
		}
	}
	args, _ := call["arguments"].(string)
	weatherArgs(t, args)
	next := postAPI(t, base, "/v1/responses", map[string]any{"model": "kvwin-tiny", "max_output_tokens": 16, "temperature": 0, "store": false, "tools": tools,
		"input": []any{ask,
			map[string]any{"type": "function_call", "call_id": call["call_id"], "name": "get_weather", "arguments": reserialised(t, args)},
			map[string]any{"type": "function_call_output", "call_id": call["call_id"], "output": toolResult}}})
	fullyCached(t, first, next)
}

// A tool's schema sent with other escaping and spacing is the same
// prompt: the second request reuses all of the first's.
func TestToolSchemaEscapingIsTheSamePrompt(t *testing.T) {
	a := apptest.Start(t, nil)
	schemas := []string{
		`{"type":"object","properties":{"path":{"type":"string","description":"a path — absolute"}},"required":["path"]}`,
		"{ \"type\" : \"object\" ,\n \"properties\" : { \"path\" : { \"type\" : \"string\" , \"description\" : \"a path \\u2014 absolute\" } } , \"required\" : [ \"path\" ] }",
	}
	var turns []posted
	for _, s := range schemas {
		turns = append(turns, postRaw(t, a, `{"model": "kvwin-tiny", "max_tokens": 1, "temperature": 0,
			"messages": [{"role": "user", "content": "Read the file."}],
			"tools": [{"type": "function", "function": {"name": "read_file", "parameters": `+s+`}}]}`))
	}
	if turns[1].prompt != turns[0].prompt || turns[1].cached < turns[1].prompt-2 {
		t.Errorf("the same schema escaped otherwise: %d prompt tokens, %d cached, after %d", turns[1].prompt, turns[1].cached, turns[0].prompt)
	}
}

func postRaw(t *testing.T, a *app.App, body string) posted {
	t.Helper()
	resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return posted{prompt: apptest.Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens")), cached: apptest.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))}
}

func TestToolLoopCachedOllamaChat(t *testing.T) {
	base := apptest.Start(t, nil).URL()
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Current weather of a city", "parameters": weatherSchema}}}
	ask := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	first := postAPI(t, base, "/api/chat", map[string]any{"model": "kvwin-tiny", "stream": false, "messages": []any{ask}, "tools": tools,
		"options": map[string]any{"tool_choice": "required", "num_predict": 160, "temperature": 0}})
	call, _ := jsonAt(first.body, "message", "tool_calls", 0, "function").(map[string]any)
	args, _ := json.Marshal(call["arguments"]) // Ollama's arguments are an object
	weatherArgs(t, string(args))
	sent := map[string]any{"function": map[string]any{"name": "get_weather", "arguments": json.RawMessage(reserialised(t, string(args)))}}
	next := postAPI(t, base, "/api/chat", map[string]any{"model": "kvwin-tiny", "stream": false, "tools": tools,
		"options": map[string]any{"num_predict": 4, "temperature": 0},
		"messages": []any{ask, map[string]any{"role": "assistant", "content": "", "tool_calls": []any{sent}},
			map[string]any{"role": "tool", "tool_name": "get_weather", "content": toolResult}}})
	fullyCached(t, first, next)
}

// metric is the value of an unlabelled metric on base's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}
