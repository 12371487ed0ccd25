package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/bench/overhead"
)

// kvwin bench overhead --json puts one row per history length on standard
// output; every measured turn reused all but the changed last message, and
// the times and allocations are filled.
func TestBenchOverheadJSONRowsPerLength(t *testing.T) {
	rows := overheadRows(t, "--messages", "2,8", "--turns", "2", "--ctx", "2048")
	if len(rows) != 2 || rows[0].Messages != 2 || rows[1].Messages != 8 {
		t.Fatalf("rows %+v, want lengths 2 and 8", rows)
	}
	if rows[1].PromptTokens <= rows[0].PromptTokens {
		t.Errorf("8 messages have %d prompt tokens, 2 have %d: want more", rows[1].PromptTokens, rows[0].PromptTokens)
	}
	for _, r := range rows {
		if r.CachedTokens == 0 || r.CachedTokens >= r.PromptTokens {
			t.Errorf("%d messages: %d of %d tokens cached, want all but the new message's", r.Messages, r.CachedTokens, r.PromptTokens)
		}
		if !(r.LatencyMs > 0 && r.PromptMs > 0 && r.Allocs > 0) || r.OverheadMs != r.OverheadMs {
			t.Errorf("%d messages: %+v, want times and allocations", r.Messages, r)
		}
	}
}

// kvwin bench overhead --gateway measures the in-process server alone and
// then through a gateway over it, in one run; --catalog, alone and then the
// same model served from a models: config of two embedded entries (asked
// for by name). Either way: the same prompt, as cached as without it.
func TestBenchOverheadViaRows(t *testing.T) {
	for _, via := range []string{"gateway", "catalog"} {
		t.Run(via, func(t *testing.T) {
			stdout := runCmd(t, "bench", "overhead", "--"+via, "--messages", "4", "--turns", "2", "--ctx", "2048", "--json")
			var rows []struct {
				Model        string  `json:"model"`
				Via          string  `json:"via"`
				Messages     int     `json:"messages"`
				PromptTokens int     `json:"prompt_tokens"`
				CachedTokens int     `json:"cached_tokens"`
				PromptMs     float64 `json:"prompt_ms"`
			}
			if err := json.Unmarshal(stdout, &rows); err != nil {
				t.Fatalf("standard output is not the JSON rows: %v\n%s", err, stdout)
			}
			if len(rows) != 2 || rows[0].Via != "" || rows[1].Via != via || rows[1].Model != rows[0].Model {
				t.Fatalf("rows %+v, want the server alone, then the same model via the %s", rows, via)
			}
			if rows[1].PromptTokens != rows[0].PromptTokens || rows[1].CachedTokens != rows[0].CachedTokens || rows[1].PromptMs <= 0 {
				t.Errorf("via the %s %+v, alone %+v: want the same prompt and cached tokens, and a prompt time", via, rows[1], rows[0])
			}
		})
	}
}

func TestBenchOverheadRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--messages", "3"}, {"--messages", "0"}, {"--turns", "0"}, {"--warmup", "0"}, {"--gateway", "--target", "http://127.0.0.1:1"}, {"--catalog", "--target", "http://127.0.0.1:1"}, {"--chain", "1"}, {"--vocab", "x", "--model", "m.gguf"}} {
		root := newRootCmd()
		root.SetArgs(append([]string{"bench", "overhead"}, args...))
		if err := root.Execute(); err == nil {
			t.Errorf("bench overhead %v: no error", args)
		}
	}
}

// kvwin bench overhead --chain runs one Responses chain and reports its
// first and last turns as two rows: the later turns continue a longer
// history the server holds, and both carry the window phase their ratio
// is taken of.
func TestBenchOverheadChainRows(t *testing.T) {
	rows := overheadRows(t, "--window", "memory", "--chain", "6", "--ctx", "2048")
	if len(rows) != 2 || rows[0].Turns != "1-3" || rows[1].Turns != "4-6" || rows[0].Messages != 6 || rows[1].Messages != 12 {
		t.Fatalf("rows %+v, want turns 1-3 (6 messages) and 4-6 (12)", rows)
	}
	if rows[1].PromptTokens <= rows[0].PromptTokens || rows[1].CachedTokens == 0 {
		t.Errorf("later turns: %d prompt tokens (%d cached), earlier %d: want a longer history, reused", rows[1].PromptTokens, rows[1].CachedTokens, rows[0].PromptTokens)
	}
	for _, r := range rows {
		if _, ok := r.Phases["window"]; !ok {
			t.Errorf("turns %s: phases %v, want the window phase", r.Turns, r.Phases)
		}
	}
}

// kvwin bench overhead --vocab serves the test model written with a real
// vocabulary: Llama 3's BPE takes far fewer tokens for the same
// conversation than the byte-level vocabulary.
func TestBenchOverheadVocab(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("locate the Ollama module (its testdata holds Llama 3's vocabulary): %v", err)
	}
	vocab := filepath.Join(strings.TrimSpace(string(out)), "model", "testdata", "llama3.2")
	tokens := map[string]int{}
	for _, name := range []string{"byte-level", "llama3"} {
		args := []string{"--messages", "8", "--turns", "1", "--ctx", "2048"}
		if name == "llama3" {
			args = append(args, "--vocab", vocab)
		}
		rows := overheadRows(t, args...)
		if len(rows) != 1 || rows[0].CachedTokens == 0 {
			t.Fatalf("%s: rows %+v, want one row, cached", name, rows)
		}
		tokens[name] = rows[0].PromptTokens
	}
	if tokens["llama3"]*2 > tokens["byte-level"] {
		t.Errorf("8 messages: %d tokens with Llama 3's vocabulary, %d byte-level: want under half", tokens["llama3"], tokens["byte-level"])
	}
}

// overheadRows runs kvwin bench overhead --json with args and returns the
// rows standard output holds.
func overheadRows(t *testing.T, args ...string) []overhead.Row {
	t.Helper()
	stdout := runCmd(t, append(append([]string{"bench", "overhead"}, args...), "--json")...)
	var rows []overhead.Row
	if err := json.Unmarshal(stdout, &rows); err != nil {
		t.Fatalf("standard output is not the JSON rows: %v\n%s", err, stdout)
	}
	return rows
}
