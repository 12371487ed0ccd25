package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	oapi "github.com/ollama/ollama/api"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// Tools and format on kvwin's Ollama API, driven by Ollama's own Go client
// against a real kvwin serve on the test model.

func ollamaClient(t *testing.T, a *app.App) (*oapi.Client, context.Context) {
	t.Helper()
	base, _ := url.Parse(a.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return oapi.NewClient(base, http.DefaultClient), ctx
}

// ollamaWeather is get_weather in Ollama's api.Tool shape: a city and a
// unit of two, both required.
func ollamaWeather() oapi.Tool {
	var tool oapi.Tool
	tool.Type = "function"
	tool.Function.Name = "get_weather"
	tool.Function.Description = "Current weather of a city"
	tool.Function.Parameters.Type = "object"
	tool.Function.Parameters.Required = []string{"city", "unit"}
	tool.Function.Parameters.Properties = map[string]struct {
		Type        oapi.PropertyType `json:"type"`
		Items       any               `json:"items,omitempty"`
		Description string            `json:"description"`
		Enum        []any             `json:"enum,omitempty"`
	}{
		"city": {Type: oapi.PropertyType{"string"}, Description: "the city"},
		"unit": {Type: oapi.PropertyType{"string"}, Enum: []any{"celsius", "fahrenheit"}},
	}
	return tool
}

// weatherCall checks that a call is get_weather with arguments that
// decode into its parameters: exactly city (a string) and unit (one of
// the enum).
func weatherCall(t *testing.T, call oapi.ToolCall) {
	t.Helper()
	if call.Function.Name != "get_weather" {
		t.Fatalf("call of %q, want get_weather", call.Function.Name)
	}
	raw, _ := json.Marshal(call.Function.Arguments)
	var args struct {
		City *string `json:"city"`
		Unit *string `json:"unit"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil || args.City == nil || args.Unit == nil ||
		(*args.Unit != "celsius" && *args.Unit != "fahrenheit") {
		t.Fatalf("arguments %s do not decode into get_weather's parameters (%v)", raw, err)
	}
}

// A chat with options.tool_choice "required" answers a call of the tool in
// message.tool_calls, arguments an object, streamed (in one object) and
// not; done_reason is "stop", as Ollama's. Sent back with the tool's
// result, the call and the result are rendered into the prompt: a longer
// result grows it by its bytes (one token each on the test model).
func TestOllamaClientRequiredToolCall(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	user := oapi.Message{Role: "user", Content: "What is the weather in Paris?"}
	chat := func(stream bool, msgs []oapi.Message, opts map[string]any) (calls []oapi.ToolCall, content string, objects, callObjects int, last oapi.ChatResponse) {
		err := client.Chat(ctx, &oapi.ChatRequest{Model: "kvwin-tiny", Stream: &stream, Messages: msgs,
			Tools: oapi.Tools{ollamaWeather()}, Options: opts}, func(r oapi.ChatResponse) error {
			objects++
			if len(r.Message.ToolCalls) > 0 {
				callObjects++
			}
			calls = append(calls, r.Message.ToolCalls...)
			content += r.Message.Content
			last = r
			return nil
		})
		if err != nil {
			t.Fatalf("chat (stream %v): %v", stream, err)
		}
		return calls, content, objects, callObjects, last
	}
	required := map[string]any{"tool_choice": "required", "num_predict": 160, "seed": 7}

	var call oapi.ToolCall
	for _, stream := range []bool{true, false} {
		calls, content, objects, callObjects, last := chat(stream, []oapi.Message{user}, required)
		if len(calls) != 1 || callObjects != 1 || strings.TrimSpace(content) != "" {
			t.Fatalf("stream %v: %d calls in %d objects, content %q; want one call and no content", stream, len(calls), callObjects, content)
		}
		weatherCall(t, calls[0])
		t.Logf("stream %v: call %s(%s) in %d objects, %d tokens", stream, calls[0].Function.Name, calls[0].Function.Arguments.String(), objects, last.EvalCount)
		// The schema's city has no maxLength (Ollama's tool type has
		// none), and the byte-level test model never ends a free string:
		// the token limit closes the call, so it is cut, "length", not a
		// finished answer.
		if !last.Done || last.DoneReason != "length" || last.EvalCount == 0 || last.EvalCount > 160 {
			t.Fatalf("stream %v: last object %+v", stream, last)
		}
		if stream && objects < 2 {
			t.Fatalf("streamed %d objects, want the call and the done object", objects)
		}
		call = calls[0]
	}

	follow := func(result string) int {
		msgs := []oapi.Message{user, {Role: "assistant", ToolCalls: []oapi.ToolCall{call}},
			{Role: "tool", ToolName: "get_weather", Content: result}}
		_, _, _, _, last := chat(false, msgs, map[string]any{"num_predict": 4, "seed": 7})
		return last.PromptEvalCount
	}
	first := func() int {
		_, _, _, _, last := chat(false, []oapi.Message{user}, map[string]any{"num_predict": 4, "seed": 7})
		return last.PromptEvalCount
	}()
	extra := ", light rain, wind 12 km/h from the west"
	short, long := follow("18 C"), follow("18 C"+extra)
	t.Logf("prompt tokens: %d alone, %d with the call and a short result, %d with a long one", first, short, long)
	if long-short != len(extra) {
		t.Errorf("a longer tool result grew the prompt by %d tokens, want %d (one per byte)", long-short, len(extra))
	}
	argsJSON, _ := json.Marshal(call.Function.Arguments)
	// The follow-up adds the call as the model writes it and the result in
	// <tool_response>, each a turn of the chat template.
	if least := len(argsJSON) + len("18 C") + len("<tool_response>\n\n</tool_response>"); short-first < least {
		t.Errorf("the call and its result added %d prompt tokens, want at least %d", short-first, least)
	}
}

// bookSchema is a format: three short strings, all required, no others.
const bookSchema = `{"type":"object","properties":{"title":{"type":"string","maxLength":10},
	"author":{"type":"string","maxLength":10},"year":{"type":"integer","minimum":1000,"maximum":2100}},
	"required":["title","author","year"],"additionalProperties":false}`

// checkBook validates a book against bookSchema.
func checkBook(t *testing.T, content string) {
	t.Helper()
	var book struct {
		Title  *string `json:"title"`
		Author *string `json:"author"`
		Year   *int    `json:"year"`
	}
	dec := json.NewDecoder(strings.NewReader(content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&book); err != nil || dec.More() {
		t.Fatalf("%q is not one object of the schema: %v", content, err)
	}
	if book.Title == nil || book.Author == nil || book.Year == nil ||
		len([]rune(*book.Title)) > 10 || len([]rune(*book.Author)) > 10 || *book.Year < 1000 || *book.Year > 2100 {
		t.Fatalf("%q does not validate against the schema", content)
	}
}

// format with a schema: the answer validates against it over several
// seeds at a temperature that makes unconstrained text wander, on
// /api/chat and /api/generate, streamed and not.
func TestOllamaClientFormatSchema(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	for seed := 1; seed <= 4; seed++ {
		stream := seed%2 == 0
		opts := map[string]any{"temperature": 1.5, "seed": seed, "num_predict": 64}
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			var chat strings.Builder
			err := client.Chat(ctx, &oapi.ChatRequest{Model: "kvwin-tiny", Stream: &stream, Options: opts, Format: json.RawMessage(bookSchema),
				Messages: []oapi.Message{{Role: "user", Content: "Name a novel."}}}, func(r oapi.ChatResponse) error {
				chat.WriteString(r.Message.Content)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkBook(t, chat.String())
			t.Logf("chat %s", chat.String())
			var gen strings.Builder
			err = client.Generate(ctx, &oapi.GenerateRequest{Model: "kvwin-tiny", Stream: &stream, Options: opts, Format: json.RawMessage(bookSchema),
				Prompt: "Name a novel."}, func(r oapi.GenerateResponse) error {
				gen.WriteString(r.Response)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkBook(t, gen.String())
			t.Logf("generate %s", gen.String())
		})
	}
}

// format "json": the answer is one JSON object, on both routes. Without
// it the same request is not (so the check can fail).
func TestOllamaClientFormatJSON(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	generate := func(format string, stream bool) string {
		var out strings.Builder
		err := client.Generate(ctx, &oapi.GenerateRequest{Model: "kvwin-tiny", Stream: &stream, Format: json.RawMessage(format),
			Prompt: "Describe the sea.", Options: map[string]any{"temperature": 1.2, "seed": 5, "num_predict": 48}},
			func(r oapi.GenerateResponse) error { out.WriteString(r.Response); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	isObject := func(s string) bool {
		var v map[string]any
		return json.Unmarshal([]byte(s), &v) == nil && v != nil
	}
	free := generate("", false)
	t.Logf("unconstrained: %q", free)
	if isObject(free) {
		t.Fatalf("the model answers a JSON object unconstrained (%q): the test cannot tell", free)
	}
	for _, stream := range []bool{true, false} {
		if got := generate(`"json"`, stream); !isObject(got) {
			t.Fatalf("stream %v: %q is not a JSON object", stream, got)
		}
		var chat strings.Builder
		err := client.Chat(ctx, &oapi.ChatRequest{Model: "kvwin-tiny", Stream: &stream, Format: json.RawMessage(`"json"`),
			Options:  map[string]any{"temperature": 1.2, "seed": 6, "num_predict": 48},
			Messages: []oapi.Message{{Role: "user", Content: "Describe the sea."}}},
			func(r oapi.ChatResponse) error { chat.WriteString(r.Message.Content); return nil })
		if err != nil || !isObject(chat.String()) {
			t.Fatalf("chat stream %v: %q is not a JSON object (%v)", stream, chat.String(), err)
		}
	}
}

// A format that is neither "json" nor a schema kvwin can enforce is a 400
// with Ollama's error body, on both routes, streamed or not, before
// anything is generated; Ollama's client reports its message.
func TestOllamaClientBadFormat(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	tests := []struct{ format, want string }{
		{`"yaml"`, `invalid format: "yaml"; expected "json" or a valid JSON Schema object`},
		{`{"type":"object","if":{"required":["a"]}}`, `format uses "if", which kvwin's grammar-constrained decoding does not support`},
	}
	for _, tt := range tests {
		want, _ := json.Marshal(map[string]string{"error": tt.want})
		for _, stream := range []bool{true, false} {
			err := client.Chat(ctx, &oapi.ChatRequest{Model: "kvwin-tiny", Stream: &stream, Format: json.RawMessage(tt.format),
				Messages: []oapi.Message{{Role: "user", Content: "hi"}}}, func(oapi.ChatResponse) error { return nil })
			if err == nil || err.Error() != tt.want {
				t.Fatalf("format %s, stream %v: client error %v; want %q", tt.format, stream, err, tt.want)
			}
			for _, path := range []string{"/api/chat", "/api/generate"} {
				body := fmt.Sprintf(`{"model":"kvwin-tiny","stream":%v,"format":%s,"prompt":"hi","messages":[{"role":"user","content":"hi"}]}`, stream, tt.format)
				resp, err := http.Post(a.URL()+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || strings.TrimSpace(string(got)) != string(want) {
					t.Fatalf("%s format %s, stream %v: %d %s; want 400 %s", path, tt.format, stream, resp.StatusCode, got, want)
				}
			}
		}
	}
}
