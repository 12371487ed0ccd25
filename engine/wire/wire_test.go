package wire

import (
	"net/http"
	"testing"
)

func TestParseWindow(t *testing.T) {
	tests := []struct {
		in   string
		want Window
	}{
		{"", Window{}},
		{"policy=sink; kept_tokens=1024; evicted_turns=12; packet_turns=0; step=3",
			Window{Present: true, Policy: "sink", KeptTokens: 1024, EvictedTurns: 12, Step: 3}},
		{"step=2,policy=memory,packet_turns=4", Window{Present: true, Policy: "memory", PacketTurns: 4, Step: 2}},
		{" Policy = full ;STEP=0; future_field=7; kept_tokens=lots; junk ", Window{Present: true, Policy: "full"}},
	}
	for _, tt := range tests {
		if got := ParseWindow(tt.in); got != tt.want {
			t.Errorf("ParseWindow(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	w := Window{Present: true, Policy: "memory", KeptTokens: 7, EvictedTurns: 2, PacketTurns: 1, Step: 1}
	if got := ParseWindow(w.String()); got != w {
		t.Fatalf("round trip %q: %+v", w.String(), got)
	}
}

// What the server writes, the benchmarks read back, byte for byte.
func TestGenerationRoundTrip(t *testing.T) {
	for _, g := range []Generation{
		{Backend: "node-1", PromptTokens: 812, CachedTokens: 800, PromptMs: 3.25},
		{Backend: "ollama-a", PromptTokens: 10, CachedTokens: 9, CachedEstimated: true, PromptMs: 0.5},
	} {
		h := http.Header{}
		g.Set(h)
		if got := ReadGeneration(h); got != g {
			t.Fatalf("wrote %+v, read %+v (%v)", g, got, h)
		}
	}
	if h := (http.Header{}); ReadGeneration(h) != (Generation{}) {
		t.Fatal("an answer without headers reads as something")
	}
}
