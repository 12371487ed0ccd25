package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/gguf"
)

// These tests drive a real kvwin serve (the embedded engine, the test
// model) with OpenAI's official Go SDK, as a client application would.

func sdkClient(a *app.App) openai.Client {
	return openai.NewClient(option.WithBaseURL(a.URL()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// weatherSchema is the tool's parameters: two fields, both required.
var weatherSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 12},
		"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
	},
	"required":             []string{"city", "unit"},
	"additionalProperties": false,
}

// weatherArgs validates arguments against weatherSchema.
func weatherArgs(t *testing.T, args string) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(args), &got); err != nil {
		t.Fatalf("arguments %q do not parse: %v", args, err)
	}
	city, ok := got["city"].(string)
	unit, _ := got["unit"].(string)
	if !ok || len([]rune(city)) > 12 || (unit != "celsius" && unit != "fahrenheit") || len(got) != 2 {
		t.Fatalf("arguments %q do not validate against the schema", args)
	}
}

func weatherParams(stream bool) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "kvwin-tiny",
		MaxTokens: openai.Int(128), // the shortest call takes 88 tokens on the byte-level test model, the longest 100: room to finish it
		Seed:      openai.Int(7),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		Tools: []openai.ChatCompletionToolParam{{Function: shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("Current weather of a city"), Parameters: weatherSchema,
		}}},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
	}
}

func TestSDKRequiredToolCallAndItsResult(t *testing.T) {
	a := apptest.Start(t, nil)
	client := sdkClient(a)
	ctx := context.Background()

	params := weatherParams(false)
	res, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	choice := res.Choices[0]
	if choice.FinishReason != "tool_calls" || len(choice.Message.ToolCalls) != 1 {
		t.Fatalf("finish %q, %d tool calls (content %q); want one call and tool_calls", choice.FinishReason, len(choice.Message.ToolCalls), choice.Message.Content)
	}
	call := choice.Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_") {
		t.Fatalf("call %+v", call)
	}
	weatherArgs(t, call.Function.Arguments)

	// The result goes back in the history and is rendered: the prompt
	// grows by the call and the result, and more with a longer result.
	follow := func(result string) int64 {
		p := weatherParams(false)
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
		p.MaxTokens = openai.Int(8)
		p.Messages = append(p.Messages, choice.Message.ToParam(), openai.ToolMessage(result, call.ID))
		r, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r.Usage.PromptTokens
	}
	short, long := follow("18 C"), follow("18 C, light rain, wind 12 km/h from the west")
	if grow := long - short; grow != int64(len(", light rain, wind 12 km/h from the west")) {
		t.Errorf("a longer tool result grew the prompt by %d tokens, want %d (one per byte on the test model)", grow, len(", light rain, wind 12 km/h from the west"))
	}
	if short <= res.Usage.PromptTokens {
		t.Errorf("follow-up prompt %d tokens, not more than the first turn's %d", short, res.Usage.PromptTokens)
	}
}

func TestSDKRequiredToolCallStreams(t *testing.T) {
	a := apptest.Start(t, nil)
	client := sdkClient(a)
	stream := client.Chat.Completions.NewStreaming(context.Background(), weatherParams(true))
	var acc openai.ChatCompletionAccumulator
	var firsts, fragments int
	finish := ""
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					firsts++
					if tc.Function.Name != "get_weather" || tc.Type != "function" {
						t.Errorf("first call chunk %+v lacks name or type", tc)
					}
				} else if tc.Function.Name != "" {
					t.Errorf("a later chunk repeats the name: %+v", tc)
				} else {
					fragments++
				}
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if firsts != 1 || fragments < 2 || finish != "tool_calls" {
		t.Fatalf("%d first chunks, %d fragments, finish %q; want 1, several, tool_calls", firsts, fragments, finish)
	}
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 1 {
		t.Fatalf("accumulated %d calls", len(calls))
	}
	weatherArgs(t, calls[0].Function.Arguments)
}

func TestSDKJSONSchemaOutput(t *testing.T) {
	a := apptest.Start(t, nil)
	client := sdkClient(a)
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"title":  map[string]any{"type": "string", "maxLength": 10},
			"author": map[string]any{"type": "string", "maxLength": 10},
			"genre":  map[string]any{"type": "string", "maxLength": 10},
		},
		"required":             []string{"title", "author", "genre"},
		"additionalProperties": false,
	}
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "kvwin-tiny",
		MaxTokens: openai.Int(96),
		Seed:      openai.Int(3),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Name a novel.")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "book", Schema: schema, Strict: openai.Bool(true)},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var book map[string]any
	content := res.Choices[0].Message.Content
	if err := json.Unmarshal([]byte(content), &book); err != nil {
		t.Fatalf("content %q does not parse: %v", content, err)
	}
	for _, k := range []string{"title", "author", "genre"} {
		if s, ok := book[k].(string); !ok || len([]rune(s)) > 10 {
			t.Errorf("%s = %v in %q; want a string of at most 10 characters", k, book[k], content)
		}
	}
	if len(book) != 3 {
		t.Errorf("%q has %d fields, want 3", content, len(book))
	}
}

func TestSDKLogprobs(t *testing.T) {
	a := apptest.Start(t, nil)
	client := sdkClient(a)
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:       "kvwin-tiny",
		MaxTokens:   openai.Int(6),
		Temperature: openai.Float(0),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(3),
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")},
	})
	if err != nil {
		t.Fatal(err)
	}
	lps := res.Choices[0].Logprobs.Content
	if len(lps) != 6 {
		t.Fatalf("%d logprobs, want one per token (6)", len(lps))
	}
	var text strings.Builder
	for i, lp := range lps {
		text.WriteString(lp.Token)
		if len(lp.TopLogprobs) != 3 || lp.Logprob > 0 {
			t.Fatalf("token %d: %+v", i, lp)
		}
		// Greedy: the chosen token is the most likely one.
		if lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob || lp.TopLogprobs[1].Logprob > lp.TopLogprobs[0].Logprob {
			t.Fatalf("token %d: chosen %q (%g), top %+v", i, lp.Token, lp.Logprob, lp.TopLogprobs)
		}
	}
	if text.String() != res.Choices[0].Message.Content {
		t.Errorf("logprob tokens spell %q, content is %q", text.String(), res.Choices[0].Message.Content)
	}
}

// The README's first request, to what make run serves (the agent test
// model, by the Makefile's file name), answers "Done." and ends.
func TestReadmeCurlAnswersAndEnds(t *testing.T) {
	model := filepath.Join(t.TempDir(), "kvwin-tiny-agent.gguf")
	if err := gguf.WriteTiny(model, gguf.DefaultAgentConfig()); err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, func(f *app.Config) { f.Model, f.Ctx = model, 4096 })
	tr := apptest.Post(t, a, map[string]any{"model": "kvwin-tiny-agent", "max_tokens": 32,
		"messages": []map[string]string{{"role": "user", "content": "Hello!"}}})
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		}
	}
	if tr.Status != 200 || tr.Content != "Done." || json.Unmarshal(tr.Body, &r) != nil || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("status %d, content %q, body %s; want 200, \"Done.\" and stop", tr.Status, tr.Content, tr.Body)
	}
}

// Output constraints kvwin cannot honour are 400s naming what.
func TestUnsupportedOutputConstraintsAre400(t *testing.T) {
	a := apptest.Start(t, nil)
	user := []map[string]string{{"role": "user", "content": "hi"}}
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"schema keyword", map[string]any{"messages": user, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "object", "not": map[string]any{}}}}}, `uses \"not\"`},
		{"unknown tool", map[string]any{"messages": user, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}, `names \"g\"`},
		{"top_logprobs over 20", map[string]any{"messages": user, "logprobs": true, "top_logprobs": 21}, "top_logprobs"},
		{"logit_bias outside the vocabulary", map[string]any{"messages": user, "logit_bias": map[string]any{"999999": 5}}, "999999"},
		{"n", map[string]any{"messages": user, "n": 2}, "n must be 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := apptest.Post(t, a, tc.body)
			if tr.Status != 400 || !strings.Contains(string(tr.Body), tc.want) {
				t.Errorf("status %d, body %s; want 400 naming %s", tr.Status, tr.Body, tc.want)
			}
		})
	}
}

// Embeddings through the SDK (which asks for base64 by default): the
// model's width, deterministic, one per input; the same through a gateway,
// which forwards them to a node.
func TestSDKEmbeddings(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 1, "prefix")
	ctx := context.Background()
	inputs := []string{"a cat sat", "on the mat", "a cat sat"}
	embed := func(a *app.App) *openai.CreateEmbeddingResponse {
		t.Helper()
		client := sdkClient(a)
		res, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "kvwin-tiny",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	direct, viaGateway := embed(nodes[0]), embed(gw)
	width := gguf.DefaultTinyConfig().Embedding
	if len(direct.Data) != 3 || direct.Usage.PromptTokens != int64(3+2*len("a cat sat")+len("on the mat")) {
		t.Fatalf("%d vectors, usage %+v", len(direct.Data), direct.Usage)
	}
	for i, d := range direct.Data {
		if len(d.Embedding) != width || d.Index != int64(i) {
			t.Fatalf("vector %d: width %d, index %d; want %d", i, len(d.Embedding), d.Index, width)
		}
		if !slices.Equal(d.Embedding, viaGateway.Data[i].Embedding) {
			t.Errorf("vector %d differs through the gateway", i)
		}
	}
	if !slices.Equal(direct.Data[0].Embedding, direct.Data[2].Embedding) || slices.Equal(direct.Data[0].Embedding, direct.Data[1].Embedding) {
		t.Error("identical inputs must give identical vectors, different ones different vectors")
	}
	node := sdkClient(nodes[0])
	one, err := node.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "kvwin-tiny", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("on the mat")},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one.Data[0].Embedding, direct.Data[1].Embedding) {
		t.Error("a float-encoded single input differs from the base64 batch's")
	}
	_, err = node.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "kvwin-tiny", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Dimensions: openai.Int(64),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "dimensions" {
		t.Errorf("dimensions 64: %v, want a 400 naming dimensions", err)
	}
}

// A gateway forwards the constraint to its node: a required call through
// it still parses and validates, and completes within its budget.
func TestSDKRequiredToolCallThroughAGateway(t *testing.T) {
	gw, _ := apptest.StartFleet(t, 1, "prefix")
	client := sdkClient(gw)
	res, err := client.Chat.Completions.New(context.Background(), weatherParams(false))
	if err != nil {
		t.Fatal(err)
	}
	choice := res.Choices[0]
	if choice.FinishReason != "tool_calls" || len(choice.Message.ToolCalls) != 1 || res.Usage.CompletionTokens > 128 {
		t.Fatalf("finish %q, %d calls, %d tokens (content %q)", choice.FinishReason, len(choice.Message.ToolCalls), res.Usage.CompletionTokens, choice.Message.Content)
	}
	weatherArgs(t, choice.Message.ToolCalls[0].Function.Arguments)
}
