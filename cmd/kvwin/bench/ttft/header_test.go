package ttft

import "testing"

func TestParseWindowState(t *testing.T) {
	tests := []struct {
		in   string
		want WindowState
	}{
		{"", WindowState{}},
		{"policy=sink; kept_tokens=1024; evicted_turns=12; packet_turns=0; step=3",
			WindowState{Present: true, Policy: "sink", KeptTokens: 1024, EvictedTurns: 12, Step: 3}},
		{"step=2,policy=memory,packet_turns=4", WindowState{Present: true, Policy: "memory", PacketTurns: 4, Step: 2}},
		{" Policy = full ;STEP=0; future_field=7; kept_tokens=lots; junk ", WindowState{Present: true, Policy: "full"}},
	}
	for _, tt := range tests {
		if got := ParseWindowState(tt.in); got != tt.want {
			t.Errorf("ParseWindowState(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
