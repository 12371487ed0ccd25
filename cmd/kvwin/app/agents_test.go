package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/gguf"
)

// Recorded coding-agent sessions (testdata/agents): the request bytes the
// real Claude Code and Codex CLIs sent to a kvwin serve on the agent test
// model, captured by a logging proxy, with the client versions. A replay
// sends them, in order, to a real kvwin serve and checks what the agents
// rely on; nothing is installed or fetched at test time. They are
// re-recorded when the test model changes (docs/development.md, Recorded
// agents).

// agentRecording is one recorded session.
type agentRecording struct {
	Client   string `json:"client"`   // e.g. "claude-code 2.1.197"
	Recorded string `json:"recorded"` // how: the command run, the server's flags
	// Model is "agent" for a session recorded on the agent test model
	// (kvwin model tiny --agent, served as "agent"); empty: the bigram one.
	Model    string         `json:"model,omitempty"`
	Requests []agentRequest `json:"requests"`
}

// agentRequest is one request as the client sent it (the key removed).
type agentRequest struct {
	Method string            `json:"method"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header"`
	Body   json.RawMessage   `json:"body"`
}

// agentAnswer is what a replay reads of one answer.
type agentAnswer struct {
	status         int
	stop           string // stop_reason, or a Responses status[/reason]
	prompt, cached int
	toolCall       bool // the answer ends in a call of the client's tools
}

// readAgentAnswer reads an Anthropic Messages or OpenAI Responses answer,
// streamed (SSE) or not.
func readAgentAnswer(t *testing.T, resp *http.Response) agentAnswer {
	t.Helper()
	a := agentAnswer{status: resp.StatusCode}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var events []json.RawMessage
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" {
				events = append(events, json.RawMessage(data))
			}
		}
	} else {
		events = append(events, body)
	}
	for _, ev := range events {
		a.read(ev)
	}
	return a
}

// read takes what one event (or a whole answer) says.
func (a *agentAnswer) read(ev json.RawMessage) {
	var e struct {
		Type    string `json:"type"`
		Message *struct {
			Usage      anthropicUsage `json:"usage"`
			StopReason string         `json:"stop_reason"`
		} `json:"message"`
		Delta *struct {
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
		ContentBlock *struct {
			Type string `json:"type"`
		} `json:"content_block"`
		// a whole Messages answer
		StopReason string          `json:"stop_reason"`
		Usage      *anthropicUsage `json:"usage"`
		Content    []struct {
			Type string `json:"type"`
		} `json:"content"`
		// Responses
		Response *responsesAnswer `json:"response"`
		Object   string           `json:"object"`
	}
	if json.Unmarshal(ev, &e) != nil {
		return
	}
	switch {
	case e.Type == "message_start" && e.Message != nil:
		a.prompt, a.cached = e.Message.Usage.InputTokens+e.Message.Usage.CacheRead, e.Message.Usage.CacheRead
	case e.Type == "message_delta" && e.Delta != nil:
		a.stop = e.Delta.StopReason
		if e.Usage != nil { // the whole usage: message_start's is 0 (the stream opens before a slot takes the prompt)
			a.prompt, a.cached = e.Usage.InputTokens+e.Usage.CacheRead, e.Usage.CacheRead
		}
	case e.Type == "content_block_start" && e.ContentBlock != nil:
		a.toolCall = a.toolCall || e.ContentBlock.Type == "tool_use"
	case e.Response != nil && (e.Type == "response.completed" || e.Type == "response.incomplete" || e.Type == "response.failed"):
		a.readResponse(*e.Response)
	case e.Object == "response":
		var r responsesAnswer
		if json.Unmarshal(ev, &r) == nil {
			a.readResponse(r)
		}
	case e.Type == "message" && e.Usage != nil:
		a.prompt, a.cached, a.stop = e.Usage.InputTokens+e.Usage.CacheRead, e.Usage.CacheRead, e.StopReason
		for _, c := range e.Content {
			a.toolCall = a.toolCall || c.Type == "tool_use"
		}
	}
}

type anthropicUsage struct {
	InputTokens int `json:"input_tokens"`
	CacheRead   int `json:"cache_read_input_tokens"`
}

type responsesAnswer struct {
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		InputDetails struct {
			Cached int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
	Output []struct {
		Type string `json:"type"`
	} `json:"output"`
}

func (a *agentAnswer) readResponse(r responsesAnswer) {
	a.stop = r.Status
	if r.IncompleteDetails != nil {
		a.stop += "/" + r.IncompleteDetails.Reason
	}
	if r.Usage != nil {
		a.prompt, a.cached = r.Usage.InputTokens, r.Usage.InputDetails.Cached
	}
	for _, o := range r.Output {
		a.toolCall = a.toolCall || o.Type == "function_call"
	}
}

// newInputBytes is the size of what a request adds after the assistant
// turn it continues: the content of an Anthropic request's last (user)
// message when an assistant message precedes it, tool results included,
// or a Responses request's items after its last assistant message or
// function_call. 0 when the request continues no answer. On the test
// model's byte vocabulary a byte is a token.
func newInputBytes(body json.RawMessage) int {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	if n := len(req.Messages); n > 0 {
		if n < 2 || req.Messages[n-2].Role != "assistant" {
			return 0
		}
		return len(req.Messages[n-1].Content)
	}
	var items []struct {
		Type string `json:"type"`
		Role string `json:"role"`
	}
	var raws []json.RawMessage
	if json.Unmarshal(req.Input, &raws) != nil || json.Unmarshal(req.Input, &items) != nil {
		return 0
	}
	n, continues := 0, false
	for i, it := range items {
		if it.Type == "function_call" || it.Role == "assistant" {
			n, continues = 0, true
			continue
		}
		n += len(raws[i])
	}
	if !continues {
		return 0
	}
	return n
}

// loadAgentRecordings reads every recording of testdata/agents.
func loadAgentRecordings(t *testing.T) []agentRecording {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join("testdata", "agents", "*.json"))
	if len(paths) == 0 {
		t.Fatal("no recordings in testdata/agents")
	}
	var out []agentRecording
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r agentRecording
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, r)
	}
	return out
}

// replayAgent sends rec's requests in order to base and checks each
// answer: 200, a stop reason an agent acts on, and, on a request that
// continues an answer, the whole prompt but what it adds (and 32 tokens
// of its framing) read from the KV cache.
func replayAgent(t *testing.T, base string, rec agentRecording) (toolCalls int) {
	t.Helper()
	for i, r := range rec.Requests {
		req, err := http.NewRequest(r.Method, base+r.Path, bytes.NewReader(r.Body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range r.Header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s request %d (%s %s): %v", rec.Client, i, r.Method, r.Path, err)
		}
		a := readAgentAnswer(t, resp)
		resp.Body.Close()
		if a.status != http.StatusOK {
			t.Fatalf("%s request %d (%s %s): status %d", rec.Client, i, r.Method, r.Path, a.status)
		}
		if !strings.Contains(r.Path, "/messages") && !strings.Contains(r.Path, "/responses") || strings.Contains(r.Path, "count_tokens") || r.Method != http.MethodPost {
			continue
		}
		switch a.stop {
		case "end_turn", "tool_use", "max_tokens", "stop_sequence", "completed", "incomplete/max_output_tokens":
		default:
			t.Fatalf("%s request %d: stop %q", rec.Client, i, a.stop)
		}
		// A request that continues an answer (tool results after a call,
		// or a resume after a cut) follows what this server generated
		// (--seed: the same prompt, the same answer).
		if added := newInputBytes(r.Body); added > 0 {
			if allowed := added + 32; a.cached < a.prompt-allowed {
				t.Errorf("%s request %d, after a tool call: %d of %d prompt tokens cached, want at least %d", rec.Client, i, a.cached, a.prompt, a.prompt-allowed)
			}
		}
		if a.toolCall {
			toolCalls++
		}
		t.Logf("%s request %d: %s, prompt %d, cached %d, tool call %v", rec.Client, i, a.stop, a.prompt, a.cached, a.toolCall)
	}
	return toolCalls
}

// TestRecordedAgentsReplay replays every recorded session against a real
// kvwin serve set as it was recorded (one slot, --seed 1, the default
// window), so each answer is the one the agent saw.
func TestRecordedAgentsReplay(t *testing.T) {
	for _, rec := range loadAgentRecordings(t) {
		t.Run(rec.Client, func(t *testing.T) {
			model := ""
			if rec.Model == "agent" {
				model = filepath.Join(t.TempDir(), "agent.gguf")
				if err := gguf.WriteTiny(model, gguf.DefaultAgentConfig()); err != nil {
					t.Fatal(err)
				}
			}
			a := apptest.Start(t, func(f *app.Config) {
				f.Slots, f.Ctx, f.Seed, f.Window = 1, 65536, 1, "memory"
				if model != "" {
					f.Model = model
				}
			})
			// On the agent model the session holds a tool round trip:
			// the call is answered again, and the request after it
			// (its result) is checked for cached tokens above.
			if calls := replayAgent(t, a.URL(), rec); rec.Model == "agent" && calls == 0 {
				t.Errorf("%s: no tool call in the replay", rec.Client)
			}
		})
	}
}
