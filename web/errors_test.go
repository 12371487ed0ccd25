package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/web/core"
)

const (
	chatPath       = "/v1/chat/completions"
	completionPath = "/v1/completions"
	hi             = `"messages":[{"role":"user","content":"hi"}]`
)

// TestBadInput: every client mistake gets its status, type and code, and
// never reaches the backend.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   string
		param  string
	}{
		{"malformed JSON", chatPath, `{"messages":[`, 400, core.CodeInvalidJSON, ""},
		{"empty body", chatPath, ``, 400, core.CodeInvalidJSON, ""},
		{"trailing garbage", chatPath, `{` + hi + `} x`, 400, core.CodeInvalidJSON, ""},
		{"body is an array", chatPath, `[]`, 400, core.CodeInvalidType, ""},
		{"field of wrong type", chatPath, `{` + hi + `,"temperature":"hot"}`, 400, core.CodeInvalidType, "temperature"},
		{"stream of wrong type", chatPath, `{` + hi + `,"stream":"yes"}`, 400, core.CodeInvalidType, "stream"},
		{"missing messages", chatPath, `{"model":"tiny"}`, 400, core.CodeMissingParameter, "messages"},
		{"null messages", chatPath, `{"messages":null}`, 400, core.CodeMissingParameter, "messages"},
		{"empty messages", chatPath, `{"messages":[]}`, 400, core.CodeMissingParameter, "messages"},
		{"unknown role", chatPath, `{"messages":[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]}`, 400, core.CodeInvalidValue, "messages[1].role"},
		{"empty role", chatPath, `{"messages":[{"content":"a"}]}`, 400, core.CodeInvalidValue, "messages[0].role"},
		{"content is a number", chatPath, `{"messages":[{"role":"user","content":5}]}`, 400, core.CodeInvalidType, "messages[0].content"},
		{"image content part", chatPath, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, core.CodeInvalidValue, "messages[0].content[1].type"},
		{"text part without text", chatPath, `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, core.CodeMissingParameter, "messages[0].content[0].text"},
		{"other model", chatPath, `{"model":"gpt-4o",` + hi + `}`, 404, core.CodeModelNotFound, "model"},
		{"max_tokens zero", chatPath, `{` + hi + `,"max_tokens":0}`, 400, core.CodeInvalidValue, "max_tokens"},
		{"max_tokens negative", chatPath, `{` + hi + `,"max_tokens":-1}`, 400, core.CodeInvalidValue, "max_tokens"},
		{"max_tokens above the slot", chatPath, `{` + hi + `,"max_tokens":513}`, 400, core.CodeInvalidValue, "max_tokens"},
		{"max_completion_tokens zero", chatPath, `{` + hi + `,"max_completion_tokens":0}`, 400, core.CodeInvalidValue, "max_completion_tokens"},
		{"max_tokens fractional", chatPath, `{` + hi + `,"max_tokens":1.5}`, 400, core.CodeInvalidType, "max_tokens"},
		{"n two", chatPath, `{` + hi + `,"n":2}`, 400, core.CodeInvalidValue, "n"},
		{"n zero", chatPath, `{` + hi + `,"n":0}`, 400, core.CodeInvalidValue, "n"},
		{"negative temperature", chatPath, `{` + hi + `,"temperature":-0.1}`, 400, core.CodeInvalidValue, "temperature"},
		{"top_p above 1", chatPath, `{` + hi + `,"top_p":1.5}`, 400, core.CodeInvalidValue, "top_p"},
		{"negative top_k", chatPath, `{` + hi + `,"top_k":-1}`, 400, core.CodeInvalidValue, "top_k"},
		{"min_p above 1", chatPath, `{` + hi + `,"min_p":2}`, 400, core.CodeInvalidValue, "min_p"},
		{"seed below -1", chatPath, `{` + hi + `,"seed":-2}`, 400, core.CodeInvalidValue, "seed"},
		{"seed above uint32", chatPath, `{` + hi + `,"seed":4294967296}`, 400, core.CodeInvalidValue, "seed"},
		{"stop is a number", chatPath, `{` + hi + `,"stop":5}`, 400, core.CodeInvalidType, "stop"},
		{"stop array of numbers", chatPath, `{` + hi + `,"stop":[1]}`, 400, core.CodeInvalidType, "stop"},
		{"invalid UTF-8", chatPath, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\"}]}", 400, core.CodeInvalidEncoding, ""},
		{"invalid UTF-8 in an unknown field", chatPath, "{" + hi + ",\"x\":\"\xc3\"}", 400, core.CodeInvalidEncoding, ""},
		{"lone high surrogate", chatPath, `{"messages":[{"role":"user","content":"a\ud800"}]}`, 400, core.CodeInvalidEncoding, ""},
		{"lone low surrogate", chatPath, `{"messages":[{"role":"user","content":"\uDC00b"}]}`, 400, core.CodeInvalidEncoding, ""},
		{"high surrogate then non-surrogate", chatPath, `{"messages":[{"role":"user","content":"\ud83d\u0041"}]}`, 400, core.CodeInvalidEncoding, ""},
		{"high surrogate at the end", chatPath, `{"messages":[{"role":"user","content":"\ud83d"}]}`, 400, core.CodeInvalidEncoding, ""},
		{"surrogate after an escaped backslash", chatPath, `{"messages":[{"role":"user","content":"\\\ud800"}]}`, 400, core.CodeInvalidEncoding, ""},
		{"two tools of one name", chatPath, `{` + hi + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}},{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, core.CodeInvalidValue, "tools[2].function.name"},
		{"tool_choice bogus without tools", chatPath, `{` + hi + `,"tool_choice":"bogus"}`, 400, core.CodeInvalidValue, "tool_choice"},
		{"completions missing prompt", completionPath, `{"model":"tiny"}`, 400, core.CodeMissingParameter, "prompt"},
		{"completions empty prompt", completionPath, `{"prompt":""}`, 400, core.CodeMissingParameter, "prompt"},
		{"completions empty prompt array", completionPath, `{"prompt":[]}`, 400, core.CodeMissingParameter, "prompt"},
		{"completions two prompts", completionPath, `{"prompt":["a","b"]}`, 400, core.CodeInvalidValue, "prompt"},
		{"completions prompt object", completionPath, `{"prompt":{"a":1}}`, 400, core.CodeInvalidType, "prompt"},
		{"completions other model", completionPath, `{"model":"x","prompt":"a"}`, 404, core.CodeModelNotFound, "model"},
		{"completions n two", completionPath, `{"prompt":"a","n":2}`, 400, core.CodeInvalidValue, "n"},
		{"completions max_tokens above the slot", completionPath, `{"prompt":"a","max_tokens":100000}`, 400, core.CodeInvalidValue, "max_tokens"},
		{"completions malformed", completionPath, `{"prompt":`, 400, core.CodeInvalidJSON, ""},
		{"completions lone surrogate", completionPath, `{"prompt":"\udfff"}`, 400, core.CodeInvalidEncoding, ""},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			body := tt.body
			if stream {
				if !strings.HasPrefix(body, "{") || !json.Valid([]byte(body)) {
					continue // the body cannot carry "stream"; the non-stream run covers it
				}
				body = `{"stream":true,` + body[1:]
			}
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, stream), func(t *testing.T) {
				f := newFake().Script("stop", engineTimings(1, 0, 1), firstEvent(1, 0), textEvent("x"))
				ts := startServer(t, f, Config{}, nil)
				resp, b := do(t, ts, http.MethodPost, tt.path, body)
				e := wantError(t, resp, b, tt.status, core.TypeInvalidRequest, tt.code)
				if e.Param != tt.param {
					t.Errorf("param = %q, want %q", e.Param, tt.param)
				}
				if n := len(f.Requests()); n != 0 {
					t.Errorf("the backend got %d requests, want none", n)
				}
			})
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	const limit = 1024
	// pad makes a valid chat body of exactly n bytes.
	pad := func(n int) string {
		head := `{"messages":[{"role":"user","content":"`
		tail := `"}]}`
		return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
	}
	tests := []struct {
		name   string
		body   string
		status int
	}{
		{"at the limit", pad(limit), http.StatusOK},
		{"one byte over", pad(limit + 1), http.StatusRequestEntityTooLarge},
		{"far over", pad(64 * limit), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake().Script("stop", engineTimings(1, 0, 1), textEvent("x"))
			ts := startServer(t, f, Config{MaxBodyBytes: limit}, nil)
			resp, b := do(t, ts, http.MethodPost, chatPath, tt.body)
			if tt.status == http.StatusOK {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status = %d, body %s", resp.StatusCode, b)
				}
				if got := f.Requests()[0].Messages[0].Content; len(got) != limit-len(`{"messages":[{"role":"user","content":""}]}`) {
					t.Errorf("content has %d bytes", len(got))
				}
				return
			}
			wantError(t, resp, b, tt.status, core.TypeInvalidRequest, core.CodeRequestTooLarge)
			if n := len(f.Requests()); n != 0 {
				t.Errorf("the backend got %d requests, want none", n)
			}
		})
	}
}

// TestBackendErrors: each engine error maps to its status, before the first
// event (as a status, streamed or not).
func TestBackendErrors(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		typ    string
		code   string
		msg    string // the message must contain it
	}{
		{"context length", &engine.ContextLengthError{PromptTokens: 600, Limit: 512}, 400, core.TypeInvalidRequest, core.CodeContextLength, "512 tokens, but the prompt has 600"},
		{"wrapped context length", fmt.Errorf("window: %w", &engine.ContextLengthError{PromptTokens: 600, Limit: 512}), 400, core.TypeInvalidRequest, core.CodeContextLength, "600"},
		{"invalid request", engine.Invalid("tokens out of vocabulary"), 400, core.TypeInvalidRequest, core.CodeInvalidRequest, "tokens out of vocabulary"},
		{"unknown model", fmt.Errorf("slot 1: %w", engine.ErrUnknownModel), 404, core.TypeInvalidRequest, core.CodeModelNotFound, "unknown model"},
		{"queue full", engine.ErrQueueFull, 429, core.TypeRateLimit, core.CodeQueueFull, "queue is full"},
		{"wrapped queue full", fmt.Errorf("node a: %w", engine.ErrQueueFull), 429, core.TypeRateLimit, core.CodeQueueFull, "node a"},
		{"closed", engine.ErrClosed, 503, core.TypeServer, core.CodeShuttingDown, "closed"},
		{"unavailable", fmt.Errorf("dial: %w", engine.ErrUnavailable), 503, core.TypeServer, core.CodeBackendUnavailable, "dial"},
		{"timeout", fmt.Errorf("node b: no first token within 2m0s: %w", engine.ErrTimeout), 504, core.TypeServer, core.CodeBackendTimeout, "no first token"},
		{"timeout after a dead backend", fmt.Errorf("%w: a: refused; %w: b: silent", engine.ErrUnavailable, engine.ErrTimeout), 504, core.TypeServer, core.CodeBackendTimeout, "silent"},
		{"anything else", errors.New("disk on fire"), 500, core.TypeServer, core.CodeInternal, "disk on fire"},
	}
	for _, tt := range tests {
		for _, path := range []string{chatPath, completionPath} {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s%s/stream=%v", tt.name, path, stream), func(t *testing.T) {
					f := newFake()
					f.Err = tt.err
					ts := startServer(t, f, Config{}, nil)
					body := `{"stream":` + jsonBool(stream) + `,` + hi + `}`
					if path == completionPath {
						body = `{"stream":` + jsonBool(stream) + `,"prompt":"hi"}`
					}
					resp, b := do(t, ts, http.MethodPost, path, body)
					e := wantError(t, resp, b, tt.status, tt.typ, tt.code)
					if !strings.Contains(e.Message, tt.msg) {
						t.Errorf("message %q does not contain %q", e.Message, tt.msg)
					}
					if resp.Header.Get(HeaderBackend) != "" {
						t.Errorf("an error before any event carries %s", HeaderBackend)
					}
				})
			}
		}
	}
}

// remoteRejection is a remote backend's 400 whose error names its URL.
type remoteRejection struct{}

func (remoteRejection) Error() string {
	return "llamaserver: POST http://10.0.0.5:8080/completion: 400 Bad Request: grammar does not parse"
}
func (remoteRejection) Unwrap() error         { return engine.ErrInvalidRequest }
func (remoteRejection) ClientMessage() string { return "grammar does not parse" }

func TestRemoteRejectionHidesTheBackendURL(t *testing.T) {
	status, body := core.Classify(fmt.Errorf("route: %w", remoteRejection{}))
	if status != 400 || body.Message != "grammar does not parse" || body.Code != core.CodeInvalidRequest {
		t.Fatalf("%d %+v", status, body)
	}
}
