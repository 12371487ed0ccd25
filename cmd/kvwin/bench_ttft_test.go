package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// A short kvwin bench ttft on the real engine writes its three files, and
// ttft.json has the documented shape.
func TestBenchTTFTWritesItsFiles(t *testing.T) {
	out := t.TempDir()
	stdout := runCmd(t, "bench", "ttft", "--turns", "24", "--budget", "512", "--policies", "full-nocache,full,sink",
		"--threads", "1", "--out", out, "--json")
	for _, name := range []string{"ttft.csv", "ttft.json", "ttft.svg"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var doc struct {
		Policies []map[string]json.RawMessage `json:"policies"`
	}
	if err := json.Unmarshal(stdout, &doc); err != nil {
		t.Fatalf("standard output is not ttft.json's document: %v", err)
	}
	if len(doc.Policies) != 3 {
		t.Fatalf("%d policies", len(doc.Policies))
	}
	for _, p := range doc.Policies {
		for _, k := range []string{"policy", "evictions", "plateau_ratio", "cached_share", "fit", "turns"} {
			if _, ok := p[k]; !ok {
				t.Fatalf("policy object lacks %q", k)
			}
		}
		var turns []map[string]json.RawMessage
		json.Unmarshal(p["turns"], &turns)
		if len(turns) == 0 {
			t.Fatal("no turns")
		}
		for _, k := range []string{"turn", "history_tokens", "prompt_tokens", "cached_tokens", "new_tokens", "ttft_ms", "prompt_ms", "step"} {
			if _, ok := turns[len(turns)-1][k]; !ok {
				t.Fatalf("turn object lacks %q", k)
			}
		}
	}
	// Every turn carries the server's phases, read from the stream's
	// trailers: they add up to their total, which the client's TTFT spans.
	var full struct {
		LatePhases map[string]float64 `json:"late_phases"`
		Turns      []struct {
			TTFTMs   float64            `json:"ttft_ms"`
			PromptMs float64            `json:"prompt_ms"`
			Phases   map[string]float64 `json:"phases"`
		} `json:"turns"`
	}
	json.Unmarshal(mustJSON(t, doc.Policies[1]), &full)
	for i, turn := range full.Turns {
		sum := 0.0
		for _, name := range []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode"} {
			d, ok := turn.Phases[name]
			if !ok {
				t.Fatalf("turn %d: no %s phase in %v", i+1, name, turn.Phases)
			}
			sum += d
		}
		total := turn.Phases["total"]
		if math.Abs(sum-total) > 0.01 || total > turn.TTFTMs || turn.Phases["prefill"] > turn.PromptMs+0.002 {
			t.Fatalf("turn %d: phases %v (sum %.3f) against TTFT %.3f ms, prompt %.3f ms", i+1, turn.Phases, sum, turn.TTFTMs, turn.PromptMs)
		}
	}
	if d, ok := full.LatePhases["outside"]; !ok || d < 0 || full.LatePhases["prefill"] <= 0 {
		t.Fatalf("late phases %v", full.LatePhases)
	}
	var sink struct {
		Evictions int `json:"evictions"`
	}
	json.Unmarshal(mustJSON(t, doc.Policies[2]), &sink)
	if sink.Evictions < 2 {
		t.Fatalf("sink made %d eviction steps over a history several times its budget", sink.Evictions)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
