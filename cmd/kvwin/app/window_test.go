package app_test

import (
	"fmt"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replayTurn is turn i's user message of the stability replay: mostly
// chatter, with a fact now and then and, later, questions about them.
func replayTurn(i int) string {
	switch {
	case i%25 == 3:
		return fmt.Sprintf("Note for later: the Project%d budget owner is Person%d.", i, i+1)
	case i > 60 && i%25 == 10:
		return fmt.Sprintf("Who is the budget owner of Project%d?", i-32)
	}
	return fmt.Sprintf("turn %d: %s", i, apptest.Words(i, 40))
}

// Two hundred turns through sink (and memory) with a budget the history
// outgrows many times: the prompt prefix changes only at eviction steps,
// and between steps each turn reuses all of the previous prompt.
func TestWindowKeepsThePrefixCachedBetweenSteps(t *testing.T) {
	for _, policy := range []string{"sink", "memory"} {
		t.Run(policy, func(t *testing.T) {
			a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.Window, f.WindowBudget = 1, 4096, policy, 2048 })
			history := apptest.Msgs("system", apptest.Words(1, 300))
			prevPrompt, prevStep, steps, history_tokens, prevKept := 0, 0, 0, 0, 0
			var shares []string
			for i := range 200 {
				history = append(history, map[string]string{"role": "user", "content": replayTurn(i)})
				tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "stability-" + policy}, map[string]any{
					"messages": history, "max_tokens": 2, "temperature": 0})
				if tr.Status != 200 {
					t.Fatalf("turn %d: %d %s", i, tr.Status, tr.Body)
				}
				w := apptest.WindowHeader(t, tr.Header)
				step := apptest.Atoi(w["step"])
				if w["policy"] != policy {
					t.Fatalf("turn %d served with policy %s", i, w["policy"])
				}
				reuse := prevPrompt - 1
				if policy == "memory" && i > 0 { // its packet rides on the latest ask: that ask is sent again without it
					reuse = prevKept - len(replayTurn(i-1)) - 16
				}
				if step == prevStep && i > 0 && tr.Cached < reuse {
					t.Fatalf("turn %d (no step): cached %d, previous prompt %d", i, tr.Cached, prevPrompt)
				}
				if step != prevStep {
					steps++
				}
				if i > 0 && step == prevStep {
					shares = append(shares, fmt.Sprintf("%.2f", float64(tr.Cached)/float64(tr.Prompt)))
				}
				prevPrompt, prevStep, prevKept = tr.Prompt, step, apptest.Atoi(w["kept_tokens"])
				history = append(history, map[string]string{"role": "assistant", "content": "ok, " + apptest.Words(i+500, 20)})
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
	a := apptest.Start(t, func(f *app.Config) { f.Window, f.WindowBudget = "memory", 1024 })
	huge := apptest.Words(5, 5000)
	cases := []struct {
		name    string
		headers map[string]string
		body    map[string]any
		status  int
		code    string
	}{
		{"empty content", nil, map[string]any{"messages": apptest.Msgs("user", "")}, 400, ""},
		{"whitespace content", nil, map[string]any{"messages": apptest.Msgs("user", "  \n\t ")}, 400, ""},
		{"unknown policy", map[string]string{"X-Kvwin-Window-Policy": "yolo"}, map[string]any{"messages": apptest.Msgs("user", "hi")}, 400, ""},
	}
	for _, p := range []string{"full", "sliding", "sink", "memory"} {
		cases = append(cases, struct {
			name    string
			headers map[string]string
			body    map[string]any
			status  int
			code    string
		}{"one message over the budget, " + p, map[string]string{"X-Kvwin-Window-Policy": p},
			map[string]any{"messages": apptest.Msgs("system", "short", "user", huge)}, 400, "context_length_exceeded"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := apptest.PostWith(t, a.URL(), c.headers, c.body)
			if tr.Status != c.status {
				t.Fatalf("status %d: %s", tr.Status, tr.Body)
			}
			e := apptest.DecodeError(t, tr.Body)
			if c.code != "" && e.Error.Code != c.code {
				t.Fatalf("code %q, want %q", e.Error.Code, c.code)
			}
		})
	}
}

// Conversation A's evicted turns are never retrieved for B: not for another
// named conversation, not for an unnamed one sharing A's system prompt.
func TestWindowIsolation(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Window, f.WindowBudget = "memory", 2048 })
	system := "You are a helpful assistant for the project team."
	long := apptest.Msgs("system", system, "user", "Hello there.", "assistant", "Hi!",
		"user", "Remember: the vault code of Zephyrine is 4417.", "assistant", "Noted.")
	for i := range 24 {
		long = append(long, apptest.Msgs("user", fmt.Sprintf("chatter %d %s", i, apptest.Words(i, 200)), "assistant", "ok")...)
	}
	ask := apptest.Msgs("user", "What is the vault code of Zephyrine?")
	own := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "A"}, map[string]any{"messages": append(append([]map[string]string{}, long...), ask...), "max_tokens": 2})
	if own.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, own.Header)["packet_turns"]) == 0 {
		t.Fatalf("A's own ask found nothing: %d %v", own.Status, own.Header.Get("X-Kvwin-Window"))
	}
	short := append(apptest.Msgs("system", system), ask...)
	for name, headers := range map[string]map[string]string{
		"another named conversation": {"X-Conversation-Id": "B"},
		"an unnamed conversation":    nil,
	} {
		tr := apptest.PostWith(t, a.URL(), headers, map[string]any{"messages": short, "max_tokens": 2})
		if tr.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, tr.Header)["packet_turns"]) != 0 {
			t.Fatalf("%s: status %d, window %q: it must not see A's turns", name, tr.Status, tr.Header.Get("X-Kvwin-Window"))
		}
	}
}

func TestCorruptMemoryStoreLeavesTheServerServing(t *testing.T) {
	f := apptest.Flags(t)
	if err := os.MkdirAll(filepath.Join(f.DataDir, "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.DataDir, "memory", "memory.db"), []byte("this is not a database, just garbage bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, func(g *app.Config) { g.DataDir, g.Window, g.WindowBudget = f.DataDir, "memory", 2600 })
	history := apptest.Msgs("system", "notes", "user", "hello", "assistant", "hi")
	for i := range 24 {
		history = append(history, apptest.Msgs("user", fmt.Sprintf("Note %d about Widget%d: %s", i, i, apptest.Words(i, 150)), "assistant", "ok")...)
	}
	history = append(history, apptest.Msgs("user", "What was the note about Widget2?")...)
	tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "c"}, map[string]any{"messages": history, "max_tokens": 2})
	if tr.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, tr.Header)["packet_turns"]) == 0 {
		t.Fatalf("status %d, window %q: the request's own turns must serve as memory", tr.Status, tr.Header.Get("X-Kvwin-Window"))
	}
	// It says so: /health 200 but degraded, a metric, and DELETE answers
	// 503 (the text may still be in the file), not 404.
	status, _, body := send(t, "GET", a.URL()+"/health", "", "", nil)
	if status != 200 || !strings.Contains(body, `"status":"degraded"`) {
		t.Fatalf("/health: %d %s, want 200 degraded", status, body)
	}
	if v := metricValue(t, a, "kvwin_memory_store_up"); v != 0 {
		t.Fatalf("kvwin_memory_store_up %v, want 0", v)
	}
	for _, conv := range []string{"c", "never-seen"} {
		status, _, body = send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/"+conv, "", "", nil)
		if status != 503 || apptest.DecodeError(t, []byte(body)).Error.Code != "memory_store_unavailable" {
			t.Fatalf("DELETE %s: %d %s, want 503 memory_store_unavailable", conv, status, body)
		}
		if strings.Contains(body, f.DataDir) {
			t.Fatalf("DELETE %s: the error names a path: %s", conv, body)
		}
	}
	// A healthy store: ok, 1.
	ok := apptest.Start(t, nil)
	if status, _, body := send(t, "GET", ok.URL()+"/health", "", "", nil); status != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("/health of a healthy server: %d %s", status, body)
	}
	if v := metricValue(t, ok, "kvwin_memory_store_up"); v != 1 {
		t.Fatalf("kvwin_memory_store_up %v with a healthy store, want 1", v)
	}
}

// With --shift an eviction step moves the kept turns' KV instead of
// recomputing it: step turns reuse almost the whole prompt.
func TestShiftKeepsStepsCached(t *testing.T) {
	recomputed := map[bool]int{}
	for _, shift := range []bool{false, true} {
		a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Window, f.WindowBudget, f.Shift = 1, "sink", 2048, shift })
		history := apptest.Msgs("system", apptest.Words(2, 200), "user", "hi", "assistant", "hello")
		prevStep, steps := 0, 0
		for i := range 100 {
			history = append(history, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d %s", i, apptest.Words(i, 60))})
			tr := apptest.PostWith(t, a.URL(), nil, map[string]any{"messages": history, "max_tokens": 2, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("turn %d: %d %s", i, tr.Status, tr.Body)
			}
			if step := apptest.Atoi(apptest.WindowHeader(t, tr.Header)["step"]); step != prevStep {
				steps++
				recomputed[shift] += tr.Prompt - tr.Cached
				prevStep = step
			}
			history = append(history, map[string]string{"role": "assistant", "content": "ok " + apptest.Words(i+9, 20)})
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
