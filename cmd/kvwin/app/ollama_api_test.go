package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	oapi "github.com/ollama/ollama/api"
)

// End-to-end tests of the Ollama API kvwin serves: Ollama's own CLI and Go
// client against a real kvwin serve on the generated test model.

// ollamaCLI is the path of the real ollama binary (v0.9.6; .ci/run
// installs it). Outside CI a machine without it skips the test.
func ollamaCLI(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("ollama")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the ollama CLI is not on PATH: %v", err)
		}
		t.Skip("the ollama CLI is not on PATH (go install github.com/ollama/ollama@v0.9.6)")
	}
	return path
}

// runOllama runs the ollama CLI against a and returns its standard output.
func runOllama(t *testing.T, bin string, a *app.App, args ...string) string {
	out, _ := runOllamaErr(t, bin, a, args...)
	return out
}

// runOllamaErr is runOllama returning standard error too.
func runOllamaErr(t *testing.T, bin string, a *app.App, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+a.Addr(), "HOME="+t.TempDir(), "TERM=dumb")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ollama %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// The real ollama CLI lists, shows, lists as running and runs kvwin's model.
func TestOllamaCLIAgainstKvwin(t *testing.T) {
	bin := ollamaCLI(t)
	// A small slot: `ollama run` sets no length limit, so the answer ends
	// when the model stops or the slot is full.
	a := apptest.Start(t, func(f *app.Config) { f.Ctx = 256 })

	list := runOllama(t, bin, a, "list")
	var tags oapi.ListResponse
	getJSON(t, a.URL()+"/api/tags", &tags)
	if len(tags.Models) != 1 || !strings.Contains(list, "kvwin-tiny") || !strings.Contains(list, tags.Models[0].Digest[:12]) {
		t.Fatalf("ollama list:\n%s\n/api/tags: %+v", list, tags)
	}

	show := runOllama(t, bin, a, "show", "kvwin-tiny")
	for _, want := range []string{"architecture", "llama", "context length", "embedding length", "completion", "num_ctx"} {
		if !strings.Contains(show, want) {
			t.Fatalf("ollama show lacks %q:\n%s", want, show)
		}
	}

	ps := runOllama(t, bin, a, "ps")
	if !strings.Contains(ps, "kvwin-tiny") || !strings.Contains(ps, "100% CPU") || !strings.Contains(ps, "Forever") {
		t.Fatalf("ollama ps:\n%s", ps)
	}

	// Not on a terminal, the CLI prepends standard input (empty here) to
	// the prompt, joined by a space. It samples at random (it sets no
	// options), so the answer's text is not known, but the prompt's token
	// count is: --verbose prints the done object's metrics.
	var want oapi.GenerateResponse
	postJSON(t, a.URL()+"/api/generate", map[string]any{"model": "kvwin-tiny", "prompt": " Tell me about the sea.",
		"stream": false, "options": map[string]any{"num_predict": 1}}, &want)
	before := a.Engine().Stats().Requests.Load()
	out, stderr := runOllamaErr(t, bin, a, "run", "--verbose", "kvwin-tiny:latest", "Tell me about the sea.")
	if got := a.Engine().Stats().Requests.Load() - before; got != 1 {
		t.Fatalf("ollama run made %d generations, want 1", got)
	}
	if !strings.Contains(stderr, fmt.Sprintf("prompt eval count:    %d token(s)", want.PromptEvalCount)) ||
		!strings.Contains(stderr, "eval count:") {
		t.Fatalf("ollama run --verbose: want a prompt eval count of %d:\n%s", want.PromptEvalCount, stderr)
	}
	t.Logf("ollama run: %q", out[:min(len(out), 80)])
}

// postJSON posts body and decodes the JSON answer.
func postJSON(t *testing.T, u string, body, v any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(u, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %v", u, resp.StatusCode, err)
	}
}

// getJSON decodes a GET's JSON answer.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
}

// Ollama's Go client chats with kvwin, streaming and not; greedy, the two
// answers are the same text, and the streamed metrics add up.
func TestOllamaGoClientChats(t *testing.T) {
	a := apptest.Start(t, nil)
	base, _ := url.Parse(a.URL())
	client := oapi.NewClient(base, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := map[string]any{"temperature": 0, "num_predict": 12, "seed": 1}
	chat := func(stream bool) (string, oapi.ChatResponse, int) {
		var text strings.Builder
		var last oapi.ChatResponse
		chunks := 0
		err := client.Chat(ctx, &oapi.ChatRequest{Model: "kvwin-tiny", Stream: &stream, Options: opts,
			Messages: []oapi.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: apptest.Words(3, 40)}}},
			func(r oapi.ChatResponse) error {
				chunks++
				text.WriteString(r.Message.Content)
				last = r
				return nil
			})
		if err != nil {
			t.Fatalf("chat (stream %v): %v", stream, err)
		}
		return text.String(), last, chunks
	}
	streamed, sLast, sChunks := chat(true)
	whole, wLast, wChunks := chat(false)
	if wChunks != 1 || sChunks < 2 {
		t.Fatalf("%d streamed objects, %d whole; want several and 1", sChunks, wChunks)
	}
	if streamed == "" || streamed != whole {
		t.Fatalf("streamed %q, whole %q", streamed, whole)
	}
	for _, r := range []oapi.ChatResponse{sLast, wLast} {
		if !r.Done || r.DoneReason != "length" || r.EvalCount != 12 || r.PromptEvalCount == 0 || r.TotalDuration <= 0 {
			t.Fatalf("last object %+v", r)
		}
	}
	if sLast.PromptEvalCount != wLast.PromptEvalCount {
		t.Fatalf("prompt_eval_count %d then %d", sLast.PromptEvalCount, wLast.PromptEvalCount)
	}
	v, err := client.Version(ctx)
	if err != nil || v != "0.9.6" {
		t.Fatalf("version %q %v", v, err)
	}
}

// A repeated prompt through /api/chat keeps Ollama's meaning of
// prompt_eval_count (the prompt's tokens, cached or not), while
// X-Kvwin-Cached-Tokens shows the prefix reused the second time.
func TestOllamaRepeatedPromptReusesTheCache(t *testing.T) {
	a := apptest.Start(t, nil)
	body, _ := json.Marshal(map[string]any{
		"model": "kvwin-tiny", "stream": false, "options": map[string]any{"temperature": 0, "num_predict": 4},
		"messages": apptest.Msgs("system", apptest.Words(5, 300), "user", apptest.Words(6, 200)),
	})
	type answer struct {
		resp   oapi.ChatResponse
		cached int
	}
	ask := func() answer {
		resp, err := http.Post(a.URL()+"/api/chat", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out answer
		if err := json.NewDecoder(resp.Body).Decode(&out.resp); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %v", resp.StatusCode, err)
		}
		out.cached, _ = strconv.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
		return out
	}
	first, second := ask(), ask()
	t.Logf("prompt_eval_duration: first %v, second %v", first.resp.PromptEvalDuration, second.resp.PromptEvalDuration)
	if first.resp.PromptEvalCount < 400 || second.resp.PromptEvalCount != first.resp.PromptEvalCount {
		t.Fatalf("prompt_eval_count %d then %d", first.resp.PromptEvalCount, second.resp.PromptEvalCount)
	}
	if first.cached != 0 || second.cached < first.resp.PromptEvalCount-16 {
		t.Fatalf("cached %d then %d of %d prompt tokens", first.cached, second.cached, first.resp.PromptEvalCount)
	}
	if second.resp.Message.Content != first.resp.Message.Content {
		t.Fatalf("greedy answers differ: %q, %q", first.resp.Message.Content, second.resp.Message.Content)
	}
}
