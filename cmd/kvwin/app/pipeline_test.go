package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"strings"
	"testing"
)

// One pipeline: the same greedy request through every wire format (OpenAI
// chat and completions, llama-server's /completion, Ollama's /api/chat and
// /api/generate), streamed and not, yields the same text.
func TestEveryWireFormatGivesTheSameText(t *testing.T) {
	a := apptest.Start(t, nil)
	system, user := "You answer in one line.", apptest.Words(8, 30)
	chat := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}}
	prompt := apptest.Words(9, 40)
	const n = 12
	ollamaOpts := map[string]any{"temperature": 0, "seed": 1, "num_predict": n}

	// Each case names the JSON path of its text in a whole answer and in a
	// streamed event (SSE "data:" lines or NDJSON lines).
	type call struct {
		name, path string
		body       map[string]any
		text       func(obj map[string]any) string
	}
	openaiChat := func(m map[string]any) string {
		ch := m["choices"].([]any)
		if len(ch) == 0 {
			return ""
		}
		c := ch[0].(map[string]any)
		if msg, ok := c["message"].(map[string]any); ok {
			return msg["content"].(string)
		}
		s, _ := c["delta"].(map[string]any)["content"].(string)
		return s
	}
	openaiText := func(m map[string]any) string {
		ch := m["choices"].([]any)
		if len(ch) == 0 {
			return ""
		}
		return ch[0].(map[string]any)["text"].(string)
	}
	content := func(m map[string]any) string { return m["content"].(string) }
	ollamaChat := func(m map[string]any) string { return m["message"].(map[string]any)["content"].(string) }
	ollamaGen := func(m map[string]any) string { return m["response"].(string) }

	groups := map[string][]call{
		"chat": {
			{"OpenAI chat", "/v1/chat/completions", map[string]any{"model": "kvwin-tiny", "messages": chat, "temperature": 0, "seed": 1, "max_tokens": n}, openaiChat},
			{"Ollama chat", "/api/chat", map[string]any{"model": "kvwin-tiny", "messages": chat, "options": ollamaOpts}, ollamaChat},
			{"Ollama generate", "/api/generate", map[string]any{"model": "kvwin-tiny", "system": system, "prompt": user, "options": ollamaOpts}, ollamaGen},
		},
		"text": {
			{"OpenAI completions", "/v1/completions", map[string]any{"model": "kvwin-tiny", "prompt": prompt, "temperature": 0, "seed": 1, "max_tokens": n}, openaiText},
			{"llama-server completion", "/completion", map[string]any{"prompt": prompt, "temperature": 0, "seed": 1, "n_predict": n}, content},
			{"Ollama generate raw", "/api/generate", map[string]any{"model": "kvwin-tiny", "raw": true, "prompt": prompt, "options": ollamaOpts}, ollamaGen},
		},
	}
	for group, calls := range groups {
		t.Run(group, func(t *testing.T) {
			var want, from string
			for _, c := range calls {
				for _, stream := range []bool{false, true} {
					c.body["stream"] = stream
					got := askText(t, a, c.path, c.body, stream, c.text)
					if got == "" {
						t.Fatalf("%s (stream %v): no text", c.name, stream)
					}
					if from == "" {
						want, from = got, c.name
						continue
					}
					if got != want {
						t.Fatalf("%s (stream %v) says %q; %s said %q", c.name, stream, got, from, want)
					}
				}
			}
		})
	}
}

// askText posts body to path and returns the text of the answer, joined
// from the stream's events when stream is set.
func askText(t *testing.T, a *app.App, path string, body map[string]any, stream bool, text func(map[string]any) string) string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(a.URL()+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d", path, resp.StatusCode)
	}
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if stream {
			if rest, ok := strings.CutPrefix(line, "data: "); ok {
				line = rest
			} else if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				continue // the blank line between SSE events
			}
			if line == "[DONE]" || line == "" {
				continue
			}
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("%s: %q is not JSON: %v", path, line, err)
		}
		if e, ok := obj["error"]; ok {
			t.Fatalf("%s: error %v", path, e)
		}
		out.WriteString(text(obj))
	}
	return out.String()
}
