package main

import (
	"encoding/json"
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
