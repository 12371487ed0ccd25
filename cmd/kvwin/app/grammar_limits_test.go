package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// The grammar and schema inputs that crashed, exhausted or stalled a
// server (issue 21), sent to a real one at the sizes and ten times
// them: each is a 400 naming the limit it breaks or a 200 whose output
// validates, and the server stays up. Ordinary schemas of the sizes the
// limits were chosen for are served and enforced.

func nest(open, inner, close string, n int) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

func schemaFormat(schema string) map[string]any {
	return map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": json.RawMessage(schema)}}
}

// postPath sends body to path and returns the status and body.
func postPath(t *testing.T, a *app.App, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := body.(map[string]any); ok && m["raw"] != nil {
		b = []byte(m["raw"].(string)) // a body json cannot encode (nested beyond its depth)
	}
	resp, err := http.Post(a.URL()+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v (is the server down?)", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func chatContent(t *testing.T, body []byte) (string, string) {
	t.Helper()
	var r apptest.ChatReply
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) == 0 {
		t.Fatalf("not a chat reply: %s", body)
	}
	return r.Choices[0].Message.Content, r.Choices[0].FinishReason
}

func enum(n int) (string, map[string]bool) {
	var b strings.Builder
	values := map[string]bool{}
	b.WriteString(`{"enum":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		v := fmt.Sprintf("value%d", i)
		values[v] = true
		fmt.Fprintf(&b, "%q", v)
	}
	b.WriteString(`]}`)
	return b.String(), values
}

// arrayDepth is the depth of nested arrays of v whose leaves are strings,
// or -1 if v is anything else.
func arrayDepth(v any) int {
	switch x := v.(type) {
	case string:
		return 0
	case []any:
		d := 1
		for _, e := range x {
			sub := arrayDepth(e)
			if sub < 0 {
				return -1
			}
			d = max(d, sub+1)
		}
		return d
	}
	return -1
}

func TestHostileGrammarsAndSchemas(t *testing.T) {
	a := apptest.Start(t, func(c *app.Config) { c.Slots = 2; c.MaxBody = 32 << 20 })
	user := []map[string]string{{"role": "user", "content": "hi"}}
	chatWith := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": user, "max_tokens": 64, "seed": 1}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	refused := func(want string) func(t *testing.T, status int, body []byte) {
		return func(t *testing.T, status int, body []byte) {
			if status != http.StatusBadRequest || !strings.Contains(string(body), want) {
				t.Fatalf("status %d %.300s, want 400 naming %q", status, body, want)
			}
		}
	}
	enum100k, values := enum(100000)
	for _, tc := range []struct {
		name  string
		path  string
		body  map[string]any
		check func(t *testing.T, status int, body []byte)
	}{
		{"completion grammar 100000 parentheses", "/completion",
			map[string]any{"prompt": "hi", "n_predict": 8, "grammar": "root ::= " + nest("(", `"a"`, ")", 100000)}, refused("limit on grammar nesting")},
		{"completion grammar 1000000 parentheses", "/completion",
			map[string]any{"prompt": "hi", "n_predict": 8, "grammar": "root ::= " + nest("(", `"a"`, ")", 1000000)}, refused("limit on grammar nesting")},
		{"chat grammar 50000 parentheses", "/v1/chat/completions",
			chatWith(map[string]any{"grammar": "root ::= " + nest("(", `"a"`, ")", 50000)}), refused("limit on grammar nesting")},
		{"chat grammar 500000 parentheses", "/v1/chat/completions",
			chatWith(map[string]any{"grammar": "root ::= " + nest("(", `"a"`, ")", 500000)}), refused("limit on grammar nesting")},
		{"pattern of 50000 groups", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"` + nest("(", "a", ")", 50000) + `"}`)}), refused("limit on pattern size")},
		{"pattern of 500000 groups", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"` + nest("(", "a", ")", 500000) + `"}`)}), refused("limit on pattern size")},
		{"maxLength 10^6", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","maxLength":1000000}`)}), refused("limit on repetition counts")},
		{"maxLength 10^8", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","maxLength":100000000}`)}), refused("limit on repetition counts")},
		{"maxLength 10^9", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","maxLength":1000000000}`)}), refused("limit on repetition counts")},
		{"array depth 5000", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(nest(`{"type":"array","items":`, `{"type":"string"}`, `}`, 5000))}), refused("limit on schema depth")},
		{"array depth 50000", "/v1/chat/completions",
			map[string]any{"raw": `{"max_tokens":64,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` +
				nest(`{"type":"array","items":`, `{"type":"string"}`, `}`, 50000) + `}}}`}, refused("")},
		{"nested pattern {0,100}", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^((a|b){0,100}){0,100}$"}`)}), refused("limit on grammar ambiguity")},
		{"nested pattern {0,500}", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^((a|b){0,500}){0,500}$"}`)}), refused("limit on grammar ambiguity")},
		{"nested pattern {0,5000}", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^((a|b){0,5000}){0,5000}$"}`)}), refused("(the limit on grammar")},
		{"pattern {100000} in 64 tokens", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^[a-z]{100000}$"}`)}), refused("limit on repetition counts")},
		{"pattern {1000} in 64 tokens", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^[a-z]{1000}$"}`)}), refused("shortest output the format allows takes 1002 tokens")},
		{"required recursive $ref", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"}`)}),
			refused("allows no finite output")},
		{"ollama format maxLength 10^8", "/api/chat",
			map[string]any{"model": "kvwin-tiny", "stream": false, "messages": user, "format": json.RawMessage(`{"type":"string","maxLength":100000000}`)}, refused("limit on repetition counts")},
		{"root $ref to a $ref", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"string","maxLength":20}}}`)}),
			func(t *testing.T, status int, body []byte) {
				if status != 200 {
					t.Fatalf("status %d %s", status, body)
				}
				content, _ := chatContent(t, body)
				var s string
				if err := json.Unmarshal([]byte(content), &s); err != nil || len([]rune(s)) > 20 {
					t.Fatalf("output %q is not a string of at most 20 characters", content)
				}
			}},
		{"array depth 100", "/v1/chat/completions",
			chatWith(map[string]any{"max_tokens": 256, "response_format": schemaFormat(nest(`{"type":"array","items":`, `{"type":"string"}`, `}`, 100))}),
			func(t *testing.T, status int, body []byte) {
				if status != 200 {
					t.Fatalf("status %d %s", status, body)
				}
				content, _ := chatContent(t, body)
				var v any
				if err := json.Unmarshal([]byte(content), &v); err != nil || arrayDepth(v) < 1 || arrayDepth(v) > 100 {
					t.Fatalf("output %q is not nested arrays of strings at most 100 deep", content)
				}
			}},
		{"enum of 100000", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(enum100k)}),
			func(t *testing.T, status int, body []byte) {
				if status != 200 {
					t.Fatalf("status %d %.300s", status, body)
				}
				content, _ := chatContent(t, body)
				var s string
				if err := json.Unmarshal([]byte(content), &s); err != nil || !values[s] {
					t.Fatalf("output %q is not one of the enum's values", content)
				}
			}},
		{"pattern ^[a-z]{3,8}$", "/v1/chat/completions",
			chatWith(map[string]any{"response_format": schemaFormat(`{"type":"string","pattern":"^[a-z]{3,8}$"}`)}),
			func(t *testing.T, status int, body []byte) {
				if status != 200 {
					t.Fatalf("status %d %s", status, body)
				}
				content, _ := chatContent(t, body)
				var s string
				if err := json.Unmarshal([]byte(content), &s); err != nil || !regexp.MustCompile(`^[a-z]{3,8}$`).MatchString(s) {
					t.Fatalf("output %q does not match ^[a-z]{3,8}$", content)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := postPath(t, a, tc.path, tc.body)
			tc.check(t, status, body)
		})
	}
	// Still up and serving.
	if tr := apptest.Post(t, a, map[string]any{"messages": user, "max_tokens": 8}); tr.Status != 200 {
		t.Fatalf("after the hostile inputs: status %d %s", tr.Status, tr.Body)
	}
	if hwm := peakRSS(t); hwm > 1500<<20 {
		t.Errorf("peak RSS %d MB, over 1,500 MB", hwm>>20)
	}
}

// peakRSS is this process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// A long constrained request does its grammar work off the engine loop:
// while it is still generating, an 8-token request on the other slot
// completes. Asserted by order: the short answer is whole while the long
// stream has not ended, and the long one then ends with all its tokens.
func TestConstrainedRequestDoesNotStallAnotherSlot(t *testing.T) {
	a := apptest.Start(t, func(c *app.Config) { c.Slots = 2 })
	user := []map[string]string{{"role": "user", "content": "hi"}}
	for _, tc := range []struct {
		name string
		path string
		body map[string]any
	}{
		{"schema string of 1500..1600", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 2000, "stream": true, "seed": 3,
			"response_format": schemaFormat(`{"type":"string","minLength":1500,"maxLength":1600}`)}},
		{"raw grammar of 1500 letters", "/completion", map[string]any{"prompt": "hi", "n_predict": 1600, "stream": true, "seed": 3,
			"grammar": `root ::= [a-z]{1500} "."`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(tc.body)
			resp, err := http.Post(a.URL()+tc.path, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("long request: status %d %s", resp.StatusCode, body)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			// Read until the long request streams text: it is running.
			var text strings.Builder
			chunks := 0
			read := func() bool {
				for sc.Scan() {
					line, ok := strings.CutPrefix(sc.Text(), "data: ")
					if !ok {
						continue
					}
					if line == "[DONE]" {
						return false
					}
					var c struct {
						Content string `json:"content"`
						Stop    bool   `json:"stop"`
						Choices []struct {
							Delta struct{ Content string } `json:"delta"`
						} `json:"choices"`
					}
					if err := json.Unmarshal([]byte(line), &c); err != nil {
						t.Fatalf("bad chunk %q", line)
					}
					text.WriteString(c.Content)
					for _, ch := range c.Choices {
						text.WriteString(ch.Delta.Content)
					}
					chunks++
					if c.Stop {
						return false
					}
					return true
				}
				return false
			}
			for text.Len() < 5 {
				if !read() {
					t.Fatalf("the long request ended after %q", text.String())
				}
			}
			short := apptest.Post(t, a, map[string]any{"messages": user, "max_tokens": 8})
			if short.Status != 200 {
				t.Fatalf("short request: %d %s", short.Status, short.Body)
			}
			var r apptest.ChatReply
			json.Unmarshal(short.Body, &r)
			at := text.Len()
			for read() {
			}
			if at >= text.Len() || text.Len() < 1500 {
				t.Fatalf("the short request finished when the long one had %d of its %d characters: not while it ran", at, text.Len())
			}
			t.Logf("short request (%d tokens) done when the long one had %d of %d characters", r.Usage.CompletionTokens, at, text.Len())
		})
	}
}
