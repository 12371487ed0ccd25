package ttft

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// sampleReport is a small run of two policies, one with every figure
// defined and one without.
func sampleReport() Report {
	turns := ramp(30, func(turn int) float64 { return float64(10 + turn%7) })
	for i := range turns {
		turns[i].PromptTokens, turns[i].CachedTokens = 200+i, 150
		turns[i].NewTokens = turns[i].PromptTokens - turns[i].CachedTokens
		turns[i].PromptMs = 2 + 0.05*float64(turns[i].NewTokens) + 0.001*float64(i*i)
		if i >= 20 {
			turns[i].Step = 1
		}
	}
	turns[20].Evicted = true
	return Report{Policies: []PolicyResult{
		Summarize(Sink, turns, 1000),
		Summarize(FullNoCache, turns[:2], 1000),
	}}
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	return slices.Sorted(maps.Keys(m))
}

func TestWriteJSONHasExactlyTheDocumentedKeys(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"document": {"policies"},
		"policy":   {"cached_share", "evictions", "fit", "plateau_ratio", "policy", "prompt_ratio", "turns"},
		"fit":      {"a", "b", "c0"},
		"turn":     {"cached_tokens", "history_tokens", "new_tokens", "prompt_ms", "prompt_tokens", "request_bytes", "step", "ttft_ms", "turn"},
	}
	check := func(what string, v any) {
		t.Helper()
		if got := keys(v); !slices.Equal(got, want[what]) {
			t.Fatalf("%s keys %v, want %v", what, got, want[what])
		}
	}
	check("document", doc)
	policies := doc.(map[string]any)["policies"].([]any)
	if len(policies) != 2 {
		t.Fatalf("%d policies, want 2", len(policies))
	}
	for _, p := range policies {
		check("policy", p)
		for _, turn := range p.(map[string]any)["turns"].([]any) {
			check("turn", turn)
		}
	}
	sink, nocache := policies[0].(map[string]any), policies[1].(map[string]any)
	check("fit", sink["fit"])
	if sink["policy"] != "sink" || sink["evictions"] != 1.0 || sink["plateau_ratio"] == nil {
		t.Fatalf("sink: %v", sink)
	}
	// Undefined figures are null, not absent and not zero.
	if nocache["fit"] != nil || nocache["plateau_ratio"] != nil {
		t.Fatalf("full-nocache with one counted turn: fit %v, plateau %v; want null", nocache["fit"], nocache["plateau_ratio"])
	}
	var empty bytes.Buffer
	if err := WriteJSON(&empty, Report{}); err != nil || empty.String() != "{\n  \"policies\": []\n}\n" {
		t.Fatalf("empty report: %q, %v", empty.String(), err)
	}
}

func TestWriteCSV(t *testing.T) {
	r := sampleReport()
	var buf bytes.Buffer
	if err := WriteCSV(&buf, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	wantHeader := []string{"policy", "turn", "history_tokens", "prompt_tokens", "cached_tokens", "new_tokens", "ttft_ms", "prompt_ms", "step", "evicted"}
	if !slices.Equal(rows[0], wantHeader) {
		t.Fatalf("header %v, want %v", rows[0], wantHeader)
	}
	if len(rows) != 1+30+2 {
		t.Fatalf("%d rows, want a header and one per policy × turn (33)", len(rows))
	}
	tests := []struct {
		row  int
		want []string
	}{
		{1, []string{"sink", "1", "100", "200", "150", "50", "11", "4.5", "0", "0"}},
		{21, []string{"sink", "21", "2100", "220", "150", "70", "10", "5.9", "1", "1"}},
		{32, []string{"full-nocache", "2", "200", "201", "150", "51", "12", "4.551", "0", "0"}},
	}
	for _, tt := range tests {
		if !slices.Equal(rows[tt.row], tt.want) {
			t.Errorf("row %d: %v, want %v", tt.row, rows[tt.row], tt.want)
		}
	}
}
