package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"kvwin/engine"
)

// TestResponsesUnknownFieldIs400: a top-level field the Responses API does
// not have is a 400 naming it, in OpenAI's words and shape, while every
// field the official SDKs (and Codex) send is accepted.
func TestResponsesUnknownFieldIs400(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(4, 0, 1), firstEvent(4, 0), textEvent("ok"))
	ts := startResponses(t, f, nil)
	for _, field := range []string{"stop", "max_tokens", "messages"} {
		resp, body := do(t, ts, http.MethodPost, "/v1/responses", `{"model":"tiny","input":"hi","`+field+`":["x"]}`)
		want := `{"error":{"message":"Unknown parameter: '` + field + `'.","type":"invalid_request_error","param":"` + field + `","code":"unknown_parameter"}}` + "\n"
		if resp.StatusCode != http.StatusBadRequest || string(body) != want {
			t.Errorf("%s: %d %s\nwant 400 %s", field, resp.StatusCode, body, want)
		}
	}
	// The top-level fields of openai-go v3's ResponseNewParams, stream
	// (NewStreaming), Codex's client_metadata and llama-server's
	// ignore_eos, each sent empty.
	sdk := []string{"access_programs", "background", "context_management", "conversation", "image", "include",
		"instructions", "max_output_tokens", "max_tool_calls", "metadata", "moderation", "parallel_tool_calls",
		"previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention",
		"reasoning", "safety_identifier", "service_tier", "store", "stream_options", "temperature", "text",
		"tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user", "stream", "client_metadata", "ignore_eos"}
	var b strings.Builder
	b.WriteString(`{"model":"tiny","input":"hi"`)
	for _, name := range sdk {
		b.WriteString(`,"` + name + `":null`)
	}
	b.WriteString("}")
	if resp, body := do(t, ts, http.MethodPost, "/v1/responses", b.String()); resp.StatusCode != http.StatusOK {
		t.Errorf("the SDK's fields: %d %s", resp.StatusCode, body)
	}
}

// TestResponsesIncompleteItem: an answer the token limit cut is incomplete,
// and so is its last output item, whole or streamed; an answer that ended
// is completed, its item too.
func TestResponsesIncompleteItem(t *testing.T) {
	for _, finish := range []string{engine.FinishLength, engine.FinishStop} {
		want := map[string]string{engine.FinishLength: "incomplete", engine.FinishStop: "completed"}[finish]
		f := newFake().Script(finish, engineTimings(4, 0, 2), firstEvent(4, 0), textEvent("cut sho"))
		ts := startResponses(t, f, nil)
		_, body := do(t, ts, http.MethodPost, "/v1/responses", `{"model":"tiny","input":"hi","max_output_tokens":2}`)
		var whole struct {
			Status string
			Output []struct{ Status string }
		}
		if err := json.Unmarshal(body, &whole); err != nil || whole.Status != want || len(whole.Output) != 1 || whole.Output[0].Status != want {
			t.Errorf("%s: whole %s, want status %s and its item's", finish, body, want)
		}
		_, body = do(t, ts, http.MethodPost, "/v1/responses", `{"model":"tiny","input":"hi","max_output_tokens":2,"stream":true}`)
		for _, ev := range []string{"response.output_item.done", "response." + want} {
			if !strings.Contains(string(body), "event: "+ev+"\n") {
				t.Errorf("%s: no %s in %s", finish, ev, body)
			}
		}
		done := string(body)[strings.Index(string(body), "event: response.output_item.done"):]
		if !strings.Contains(done[:strings.Index(done, "\n\n")], `"status":"`+want+`"`) {
			t.Errorf("%s: the item ends %s, want status %s", finish, done, want)
		}
	}
}
