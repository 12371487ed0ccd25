package ttft

import "testing"

func TestChatMLCounter(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Hi"}}
	// [BOS] <s>system\nYou are terse.<e>\n <s>user\nHi<e>\n <s>assistant\n
	// controls: BOS + 2·2 + 1 = 6; text: 7+14+1 + 5+2+1 + 10 = 40.
	tests := []struct {
		bpt  float64
		want int
	}{
		{1, 46},
		{4, 6 + 10},
		{3, 6 + 14}, // ceil(40/3)
	}
	for _, tt := range tests {
		count, err := ChatMLCounter(tt.bpt)
		if err != nil {
			t.Fatal(err)
		}
		if got := count(msgs); got != tt.want {
			t.Errorf("bytes per token %v: %d tokens, want %d", tt.bpt, got, tt.want)
		}
	}
	for _, bad := range []float64{0, -1} {
		if _, err := ChatMLCounter(bad); err == nil {
			t.Errorf("bytes per token %v accepted", bad)
		}
	}
}

func TestMessagesSendsTheWorkloadHistory(t *testing.T) {
	c := Conversation{System: "sys", Turns: []Turn{{"u1", "a1"}, {"u2", "a2"}, {"u3", "a3"}}}
	tests := []struct {
		n    int
		salt string
		want []Message
	}{
		{1, "", []Message{{"system", "sys"}, {"user", "u1"}}},
		{3, "", []Message{{"system", "sys"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}, {"assistant", "a2"}, {"user", "u3"}}},
		{2, "Q7 ", []Message{{"system", "Q7 sys"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}}},
	}
	for _, tt := range tests {
		got := c.Messages(tt.n, tt.salt)
		if len(got) != len(tt.want) {
			t.Fatalf("turn %d: %v, want %v", tt.n, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("turn %d: %v, want %v", tt.n, got, tt.want)
			}
		}
	}
	noSystem := Conversation{Turns: c.Turns}
	if got := noSystem.Messages(1, ""); len(got) != 1 || got[0].Role != "user" {
		t.Fatalf("no system prompt: %v", got)
	}
	if got := noSystem.Messages(1, "Q7"); len(got) != 2 || got[0] != (Message{"system", "Q7"}) {
		t.Fatalf("salt without a system prompt: %v", got)
	}
}
