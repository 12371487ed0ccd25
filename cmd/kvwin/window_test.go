package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// windowHeader parses X-Kvwin-Window.
func windowHeader(t *testing.T, h http.Header) map[string]string {
	t.Helper()
	raw := h.Get("X-Kvwin-Window")
	out := map[string]string{}
	for _, part := range strings.Split(raw, "; ") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			t.Fatalf("bad X-Kvwin-Window %q", raw)
		}
		out[k] = v
	}
	for _, k := range []string{"policy", "kept_tokens", "evicted_turns", "packet_turns", "step"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("X-Kvwin-Window %q lacks %s", raw, k)
		}
	}
	return out
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// postWith sends a chat request with extra headers.
func postWith(t *testing.T, base string, headers map[string]string, body map[string]any) turn {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr := turn{status: resp.StatusCode, header: resp.Header}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	tr.body = buf.Bytes()
	tr.prompt = atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens"))
	tr.cached = atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
	return tr
}

// replayTurn is turn i's user message of the stability replay: mostly
// chatter, with a fact now and then and, later, questions about them.
func replayTurn(i int) string {
	switch {
	case i%25 == 3:
		return fmt.Sprintf("Note for later: the Project%d budget owner is Person%d.", i, i+1)
	case i > 60 && i%25 == 10:
		return fmt.Sprintf("Who is the budget owner of Project%d?", i-32)
	}
	return fmt.Sprintf("turn %d: %s", i, words(i, 40))
}

// Two hundred turns through sink (and memory) with a budget the history
// outgrows many times: the prompt prefix changes only at eviction steps,
// and between steps each turn reuses all of the previous prompt.
func TestWindowKeepsThePrefixCachedBetweenSteps(t *testing.T) {
	for _, policy := range []string{"sink", "memory"} {
		t.Run(policy, func(t *testing.T) {
			a := startApp(t, func(f *serveFlags) { f.slots, f.ctx, f.window, f.windowBudget = 1, 4096, policy, 2048 })
			history := msgs("system", words(1, 300))
			prevPrompt, prevStep, steps, history_tokens, prevKept := 0, 0, 0, 0, 0
			var shares []string
			for i := range 200 {
				history = append(history, map[string]string{"role": "user", "content": replayTurn(i)})
				tr := postWith(t, a.url(), map[string]string{"X-Conversation-Id": "stability-" + policy}, map[string]any{
					"messages": history, "max_tokens": 2, "temperature": 0})
				if tr.status != 200 {
					t.Fatalf("turn %d: %d %s", i, tr.status, tr.body)
				}
				w := windowHeader(t, tr.header)
				step := atoi(w["step"])
				if w["policy"] != policy {
					t.Fatalf("turn %d served with policy %s", i, w["policy"])
				}
				reuse := prevPrompt - 1
				if policy == "memory" && i > 0 { // its packet rides on the latest ask: that ask is sent again without it
					reuse = prevKept - len(replayTurn(i-1)) - 16
				}
				if step == prevStep && i > 0 && tr.cached < reuse {
					t.Fatalf("turn %d (no step): cached %d, previous prompt %d", i, tr.cached, prevPrompt)
				}
				if step != prevStep {
					steps++
				}
				if i > 0 && step == prevStep {
					shares = append(shares, fmt.Sprintf("%.2f", float64(tr.cached)/float64(tr.prompt)))
				}
				prevPrompt, prevStep, prevKept = tr.prompt, step, atoi(w["kept_tokens"])
				history = append(history, map[string]string{"role": "assistant", "content": "ok, " + words(i+500, 20)})
				history_tokens += len(replayTurn(i)) + 40
			}
			// sink frees (High−Low)·budget at a step: at most one step per 10
			// turns here. memory also reserves room for each ask's packet,
			// so it steps more often; its bound is the reuse between steps.
			if steps < 2 || policy == "sink" && steps > 20 {
				t.Fatalf("%d eviction steps in 200 turns: want at least 2 and at most one per 10 turns", steps)
			}
			if history_tokens < 3*2048 {
				t.Fatalf("history of %d tokens does not outgrow the budget several times", history_tokens)
			}
			t.Logf("%s: %d steps; cached share per turn between steps: %s", policy, steps, strings.Join(shares[:min(len(shares), 40)], " "))
		})
	}
}

func TestWindowBadInput(t *testing.T) {
	a := startApp(t, func(f *serveFlags) { f.window, f.windowBudget = "memory", 1024 })
	huge := words(5, 5000)
	cases := []struct {
		name    string
		headers map[string]string
		body    map[string]any
		status  int
		code    string
	}{
		{"empty content", nil, map[string]any{"messages": msgs("user", "")}, 400, ""},
		{"whitespace content", nil, map[string]any{"messages": msgs("user", "  \n\t ")}, 400, ""},
		{"unknown policy", map[string]string{"X-Kvwin-Window-Policy": "yolo"}, map[string]any{"messages": msgs("user", "hi")}, 400, ""},
	}
	for _, p := range []string{"full", "sliding", "sink", "memory"} {
		cases = append(cases, struct {
			name    string
			headers map[string]string
			body    map[string]any
			status  int
			code    string
		}{"one message over the budget, " + p, map[string]string{"X-Kvwin-Window-Policy": p},
			map[string]any{"messages": msgs("system", "short", "user", huge)}, 400, "context_length_exceeded"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := postWith(t, a.url(), c.headers, c.body)
			if tr.status != c.status {
				t.Fatalf("status %d: %s", tr.status, tr.body)
			}
			e := decodeError(t, tr.body)
			if c.code != "" && e.Error.Code != c.code {
				t.Fatalf("code %q, want %q", e.Error.Code, c.code)
			}
		})
	}
}

// Conversation A's evicted turns are never retrieved for B: not for another
// named conversation, not for an unnamed one sharing A's system prompt.
func TestWindowIsolation(t *testing.T) {
	a := startApp(t, func(f *serveFlags) { f.window, f.windowBudget = "memory", 2048 })
	system := "You are a helpful assistant for the project team."
	long := msgs("system", system, "user", "Hello there.", "assistant", "Hi!",
		"user", "Remember: the vault code of Zephyrine is 4417.", "assistant", "Noted.")
	for i := range 24 {
		long = append(long, msgs("user", fmt.Sprintf("chatter %d %s", i, words(i, 200)), "assistant", "ok")...)
	}
	ask := msgs("user", "What is the vault code of Zephyrine?")
	own := postWith(t, a.url(), map[string]string{"X-Conversation-Id": "A"}, map[string]any{"messages": append(append([]map[string]string{}, long...), ask...), "max_tokens": 2})
	if own.status != 200 || atoi(windowHeader(t, own.header)["packet_turns"]) == 0 {
		t.Fatalf("A's own ask found nothing: %d %v", own.status, own.header.Get("X-Kvwin-Window"))
	}
	short := append(msgs("system", system), ask...)
	for name, headers := range map[string]map[string]string{
		"another named conversation": {"X-Conversation-Id": "B"},
		"an unnamed conversation":    nil,
	} {
		tr := postWith(t, a.url(), headers, map[string]any{"messages": short, "max_tokens": 2})
		if tr.status != 200 || atoi(windowHeader(t, tr.header)["packet_turns"]) != 0 {
			t.Fatalf("%s: status %d, window %q: it must not see A's turns", name, tr.status, tr.header.Get("X-Kvwin-Window"))
		}
	}
}

func TestCorruptMemoryStoreLeavesTheServerServing(t *testing.T) {
	f := testFlags(t)
	if err := os.MkdirAll(filepath.Join(f.dataDir, "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dataDir, "memory", "memory.db"), []byte("this is not a database, just garbage bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApp(t, func(g *serveFlags) { g.dataDir, g.window, g.windowBudget = f.dataDir, "memory", 2600 })
	history := msgs("system", "notes", "user", "hello", "assistant", "hi")
	for i := range 24 {
		history = append(history, msgs("user", fmt.Sprintf("Note %d about Widget%d: %s", i, i, words(i, 150)), "assistant", "ok")...)
	}
	history = append(history, msgs("user", "What was the note about Widget2?")...)
	tr := postWith(t, a.url(), map[string]string{"X-Conversation-Id": "c"}, map[string]any{"messages": history, "max_tokens": 2})
	if tr.status != 200 || atoi(windowHeader(t, tr.header)["packet_turns"]) == 0 {
		t.Fatalf("status %d, window %q: the request's own turns must serve as memory", tr.status, tr.header.Get("X-Kvwin-Window"))
	}
}

// With --shift an eviction step moves the kept turns' KV instead of
// recomputing it: step turns reuse almost the whole prompt.
func TestShiftKeepsStepsCached(t *testing.T) {
	recomputed := map[bool]int{}
	for _, shift := range []bool{false, true} {
		a := startApp(t, func(f *serveFlags) { f.slots, f.window, f.windowBudget, f.shift = 1, "sink", 2048, shift })
		history := msgs("system", words(2, 200), "user", "hi", "assistant", "hello")
		prevStep, steps := 0, 0
		for i := range 100 {
			history = append(history, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d %s", i, words(i, 60))})
			tr := postWith(t, a.url(), nil, map[string]any{"messages": history, "max_tokens": 2, "temperature": 0})
			if tr.status != 200 {
				t.Fatalf("turn %d: %d %s", i, tr.status, tr.body)
			}
			if step := atoi(windowHeader(t, tr.header)["step"]); step != prevStep {
				steps++
				recomputed[shift] += tr.prompt - tr.cached
				prevStep = step
			}
			history = append(history, map[string]string{"role": "assistant", "content": "ok " + words(i+9, 20)})
		}
		if steps < 2 {
			t.Fatalf("shift=%v: %d steps", shift, steps)
		}
		t.Logf("shift=%v: %d steps, %d tokens computed at steps", shift, steps, recomputed[shift])
	}
	if 4*recomputed[true] > recomputed[false] {
		t.Fatalf("steps computed %d tokens with --shift, %d without: want at most a quarter", recomputed[true], recomputed[false])
	}
}
