package web

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/ollama"
)

// ollamaLines splits an NDJSON body into its objects.
func ollamaLines(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// wantOllamaError checks an Ollama-shaped error: {"error": "…"} and nothing else.
func wantOllamaError(t *testing.T, resp *http.Response, body []byte, status int, mentions string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || len(e) != 1 {
		t.Fatalf("body %s is not {\"error\": …}", body)
	}
	msg, ok := e["error"].(string)
	if !ok || !strings.Contains(msg, mentions) {
		t.Fatalf("error %v does not mention %q", e["error"], mentions)
	}
}

// The chat stream: one NDJSON object per piece of text, then a done object
// with Ollama's metrics taken from the backend's timings; the request that
// reached the backend carries the options, messages and conversation.
func TestOllamaChatStream(t *testing.T) {
	f := newFake()
	tm := engine.Timings{PromptTokens: 10, CachedTokens: 4, PromptEval: 5 * time.Millisecond, GeneratedTokens: 2, Decode: 7 * time.Millisecond}
	f.Script(engine.FinishLength, tm, firstEvent(10, 4), textEvent("Hel"), textEvent("lo"))
	ts := startServer(t, f, Config{}, nil)

	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/chat", strings.NewReader(`{"model":"tiny:latest",
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
		"options":{"num_predict":2,"temperature":0,"top_k":5,"seed":7,"stop":["\n\n"],"num_ctx":512},"keep_alive":"5m"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderConversation, "conv-1")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Trailer.Get(HeaderCachedTokens) != "4" || resp.Trailer.Get(HeaderPromptTokens) != "10" {
		t.Fatalf("cached %q of %q (trailers)", resp.Trailer.Get(HeaderCachedTokens), resp.Trailer.Get(HeaderPromptTokens))
	}
	lines := ollamaLines(t, []byte(body))
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %s", len(lines), body)
	}
	for i, want := range []string{"Hel", "lo", ""} {
		msg := lines[i]["message"].(map[string]any)
		if msg["content"] != want || msg["role"] != "assistant" || lines[i]["model"] != "tiny:latest" {
			t.Fatalf("line %d: %v", i, lines[i])
		}
		if done := lines[i]["done"].(bool); done != (i == 2) {
			t.Fatalf("line %d: done %v", i, done)
		}
	}
	last := lines[2]
	if last["done_reason"] != "length" || last["prompt_eval_count"] != 10.0 || last["eval_count"] != 2.0 ||
		last["prompt_eval_duration"] != float64(5*time.Millisecond) || last["eval_duration"] != float64(7*time.Millisecond) {
		t.Fatalf("done object %v", last)
	}
	if last["total_duration"].(float64) <= 0 {
		t.Fatalf("total_duration %v", last["total_duration"])
	}

	got := f.Requests()[0]
	if got.MaxTokens != 2 || got.Sampling.Temperature != 0 || got.Sampling.TopK != 5 || got.Sampling.Seed != 7 ||
		len(got.Stop) != 1 || got.Stop[0] != "\n\n" || got.Conversation != "conv-1" || got.Tenant != DefaultTenant {
		t.Fatalf("backend got %+v", got)
	}
	if len(got.Messages) != 2 || got.Messages[0] != (engine.Message{Role: "system", Content: "be brief"}) {
		t.Fatalf("messages %+v", got.Messages)
	}
}

// "stream": false answers one object with the whole text; /api/generate's
// three prompt forms reach the backend as Ollama means them.
func TestOllamaWholeAndGenerateForms(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(6, 0, 2), firstEvent(6, 0), textEvent("Hello"))
	ts := startServer(t, f, Config{}, nil)

	resp, body := do(t, ts, http.MethodPost, "/api/chat", `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	var chat oapi.ChatResponse
	if err := json.Unmarshal(body, &chat); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if chat.Message.Content != "Hello" || !chat.Done || chat.DoneReason != "stop" || chat.PromptEvalCount != 6 || chat.EvalCount != 2 {
		t.Fatalf("chat %+v", chat)
	}

	tests := []struct {
		name, body string
		want       engine.Request
	}{
		{"chat of one turn", `{"model":"tiny","stream":false,"system":"sys","prompt":"why"}`,
			engine.Request{Messages: []engine.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "why"}}}},
		{"raw", `{"model":"tiny","stream":false,"raw":true,"prompt":"[INST] why"}`, engine.Request{Prompt: "[INST] why"}},
		{"template", `{"model":"tiny","stream":false,"system":"sys","prompt":"why",
			"template":"{{ if .System }}S:{{ .System }} {{ end }}Q:{{ .Prompt }} A:"}`, engine.Request{Prompt: "S:sys Q:why A:"}},
		{"template over messages", `{"model":"tiny","stream":false,"prompt":"why",
			"template":"{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}<assistant>"}`, engine.Request{Prompt: "<user>why<assistant>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.Requests())
			resp, body := do(t, ts, http.MethodPost, "/api/generate", tt.body)
			var gen oapi.GenerateResponse
			if err := json.Unmarshal(body, &gen); err != nil || resp.StatusCode != 200 || gen.Response != "Hello" || !gen.Done {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := f.Requests()[n]
			if got.Prompt != tt.want.Prompt || len(got.Messages) != len(tt.want.Messages) {
				t.Fatalf("backend got prompt %q messages %+v", got.Prompt, got.Messages)
			}
			for i := range got.Messages {
				if got.Messages[i] != tt.want.Messages[i] {
					t.Fatalf("message %d: %+v", i, got.Messages[i])
				}
			}
		})
	}
}

// Errors are Ollama's {"error": "…"} with the right status, before the
// backend is asked; a request with nothing to generate "loads" the model.
func TestOllamaErrors(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(1, 0, 1), textEvent("x"))
	ts := startServer(t, f, Config{}, nil)
	tests := []struct {
		name, method, path, body string
		status                   int
		mentions                 string
	}{
		{"unknown model", "POST", "/api/chat", `{"model":"llama3","messages":[{"role":"user","content":"hi"}]}`, 404, `"llama3" not found`},
		{"no model", "POST", "/api/generate", `{"prompt":"hi"}`, 400, "model is required"},
		{"options of the wrong type", "POST", "/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"temperature":"hot"}}`, 400, "options.temperature"},
		{"temperature out of range", "POST", "/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"temperature":9}}`, 400, "options.temperature"},
		{"num_ctx beyond the slot", "POST", "/api/generate", `{"model":"tiny","prompt":"hi","options":{"num_ctx":8192}}`, 400, "options.num_ctx"},
		{"num_predict 0", "POST", "/api/generate", `{"model":"tiny","prompt":"hi","options":{"num_predict":0}}`, 400, "options.num_predict"},
		{"bad role", "POST", "/api/chat", `{"model":"tiny","messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role"},
		{"images", "POST", "/api/generate", `{"model":"tiny","prompt":"hi","images":["aGk="]}`, 400, "images"},
		{"think", "POST", "/api/chat", `{"model":"tiny","think":true,"messages":[{"role":"user","content":"hi"}]}`, 400, "thinking"},
		{"template that does not parse", "POST", "/api/generate", `{"model":"tiny","prompt":"hi","template":"{{ .Prompt "}`, 400, "template"},
		{"not JSON", "POST", "/api/chat", `{"model":`, 400, "not valid JSON"},
		{"show of an unknown model", "POST", "/api/show", `{"model":"llama3"}`, 404, "not found"},
		{"unknown route", "POST", "/api/blobs/sha256:00", ``, 404, "unknown route"},
		{"pull of an unknown model", "POST", "/api/pull", `{"model":"llama3"}`, 404, "not found"},
		{"delete", "DELETE", "/api/delete", `{"model":"tiny"}`, 501, "does not delete models"},
		{"wrong method", "GET", "/api/chat", ``, 405, "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, ts, tt.method, tt.path, tt.body)
			wantOllamaError(t, resp, body, tt.status, tt.mentions)
		})
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("the backend got %d requests", n)
	}

	for path, body := range map[string]string{"/api/chat": `{"model":"tiny"}`, "/api/generate": `{"model":"tiny","keep_alive":0}`} {
		resp, b := do(t, ts, http.MethodPost, path, body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != 200 || m["done"] != true {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		want := "load"
		if strings.Contains(body, "keep_alive") {
			want = "unload"
		}
		if m["done_reason"] != want {
			t.Fatalf("%s: done_reason %v, want %s", path, m["done_reason"], want)
		}
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("loading the model reached the backend %d times", n)
	}
}

// A backend error before the first event keeps its status; after it, the
// stream ends with Ollama's in-stream error line.
func TestOllamaBackendErrors(t *testing.T) {
	f := newFake()
	f.Err = engine.ErrQueueFull
	ts := startServer(t, f, Config{}, nil)
	resp, body := do(t, ts, http.MethodPost, "/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	wantOllamaError(t, resp, body, http.StatusTooManyRequests, "queue")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}

	f = newFake()
	f.Events = []engine.Event{firstEvent(3, 0), textEvent("Hel")}
	f.ErrAfter = errors.New("the engine fell over")
	ts = startServer(t, f, Config{}, nil)
	resp, body = do(t, ts, http.MethodPost, "/api/generate", `{"model":"tiny","prompt":"hi"}`)
	lines := ollamaLines(t, body)
	if resp.StatusCode != 200 || len(lines) != 2 || lines[0]["response"] != "Hel" || !strings.Contains(lines[1]["error"].(string), "fell over") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// The model routes name the served model in both name and model, with a
// digest the CLI can shorten; HEAD / and /api/version answer as Ollama's.
func TestOllamaModelRoutes(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	resp, body := do(t, ts, http.MethodGet, "/api/tags", "")
	var tags oapi.ListResponse
	if err := json.Unmarshal(body, &tags); err != nil || resp.StatusCode != 200 || len(tags.Models) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if m := tags.Models[0]; m.Name != "tiny" || m.Model != "tiny" || len(m.Digest) != 64 {
		t.Fatalf("tags %+v", m)
	}
	resp, body = do(t, ts, http.MethodGet, "/api/ps", "")
	var ps oapi.ProcessResponse
	if err := json.Unmarshal(body, &ps); err != nil || resp.StatusCode != 200 || len(ps.Models) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if m := ps.Models[0]; m.Name != "tiny" || m.Digest != tags.Models[0].Digest || m.ExpiresAt.Before(time.Now().AddDate(20, 0, 0)) {
		t.Fatalf("ps %+v", m)
	}
	resp, body = do(t, ts, http.MethodPost, "/api/show", `{"name":"tiny:latest"}`)
	var show oapi.ShowResponse
	if err := json.Unmarshal(body, &show); err != nil || resp.StatusCode != 200 || !strings.Contains(show.Parameters, "num_ctx 512") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = do(t, ts, http.MethodGet, "/api/version", "")
	if resp.StatusCode != 200 || string(body) != `{"version":"`+ollama.Version+`"}`+"\n" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = do(t, ts, http.MethodHead, "/", "")
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HEAD /: %d %q", resp.StatusCode, body)
	}
	resp, body = do(t, ts, http.MethodGet, "/", "")
	if resp.StatusCode != 200 || string(body) != "Ollama is running" {
		t.Fatalf("GET /: %d %q", resp.StatusCode, body)
	}
}
