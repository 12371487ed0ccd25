package main

import (
	"encoding/json"
	"math"
	"testing"
)

// kvwin bench prefill --json puts only its rows on standard output, one per
// size, with the raw side next to the engine's and the ratios computed from
// the figures shown.
func TestBenchPrefillJSONHasTheRawSideAndItsRatios(t *testing.T) {
	stdout := runCmd(t, "bench", "prefill", "--tokens", "200,600", "--repeat", "2", "--threads", "1", "--batch", "256", "--json")
	var rows []map[string]float64
	if err := json.Unmarshal(stdout, &rows); err != nil {
		t.Fatalf("standard output is not the JSON rows: %v\n%s", err, stdout)
	}
	if len(rows) != 2 || rows[0]["tokens"] != 200 || rows[1]["tokens"] != 600 {
		t.Fatalf("rows %v, want sizes 200 and 600", rows)
	}
	for _, r := range rows {
		for _, k := range []string{"cold_prompt_ms", "raw_prompt_ms", "cold_busy_ms", "raw_busy_ms", "hit_ttft_ms", "cold_ttft_ms", "tokens_per_s"} {
			if !(r[k] > 0) {
				t.Fatalf("%v tokens: %s = %v, want a time", r["tokens"], k, r[k])
			}
		}
		for ratio, parts := range map[string][2]string{
			"cold_over_raw":           {"cold_prompt_ms", "raw_prompt_ms"},
			"cold_busy_over_raw_busy": {"cold_busy_ms", "raw_busy_ms"},
			"cold_over_hit":           {"cold_ttft_ms", "hit_ttft_ms"},
		} {
			if want := r[parts[0]] / r[parts[1]]; math.Abs(r[ratio]-want) > 1e-9*want {
				t.Fatalf("%v tokens: %s = %v, want %s / %s = %v", r["tokens"], ratio, r[ratio], parts[0], parts[1], want)
			}
		}
	}
}

func TestBenchPrefillRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--repeat", "0"},
		{"--tokens", "1"},
		{"--batch", "1024"}, // above the binding's micro-batch
	} {
		root := newRootCmd()
		root.SetArgs(append([]string{"bench", "prefill", "--threads", "1"}, args...))
		if err := root.Execute(); err == nil {
			t.Errorf("bench prefill %v: no error", args)
		}
	}
}
