package ollama

import (
	"strings"
	"testing"
	"time"

	"kvwin/kvcache"
)

// TestResidency: the memory of what the server's slots hold, step by step.
func TestResidency(t *testing.T) {
	a := strings.Repeat("a", 640) // 10 blocks
	b := strings.Repeat("b", 640)
	t0 := time.Date(2025, 7, 1, 10, 0, 0, 0, time.UTC)
	type step struct {
		op   string // "record", "match" or "reset"
		text string
		at   time.Duration // after t0
		want int           // match: bytes held
	}
	tests := []struct {
		name  string
		slots int
		ttl   time.Duration
		steps []step
	}{
		{name: "prefix in whole blocks", slots: 1, ttl: time.Hour, steps: []step{
			{op: "record", text: a},
			{op: "match", text: a + "more", want: 640},
			{op: "match", text: a[:100] + "x", want: 64},
			{op: "match", text: a[:63], want: 0}, // no full block
			{op: "match", text: b, want: 0},
		}},
		{name: "the answer extends the held prefix", slots: 1, ttl: time.Hour, steps: []step{
			{op: "record", text: a + b},
			{op: "match", text: a + b + "next turn", want: 1280},
		}},
		{name: "one slot: the newest wins", slots: 1, ttl: time.Hour, steps: []step{
			{op: "record", text: a},
			{op: "record", text: b},
			{op: "match", text: a, want: 0},
			{op: "match", text: b, want: 640},
		}},
		{name: "two slots: the least recently used goes", slots: 2, ttl: time.Hour, steps: []step{
			{op: "record", text: a, at: 1},
			{op: "record", text: b, at: 2},
			{op: "record", text: a + b, at: 3}, // continues a: replaces a's slot, not b's
			{op: "match", text: b, at: 4, want: 640},
			{op: "match", text: a, at: 4, want: 640},
			{op: "record", text: strings.Repeat("c", 640), at: 5}, // b is older: it goes
			{op: "match", text: b, at: 6, want: 0},
			{op: "match", text: a + b, at: 6, want: 1280},
		}},
		{name: "the keep-alive passes: unloaded", slots: 1, ttl: time.Minute, steps: []step{
			{op: "record", text: a},
			{op: "match", text: a, at: time.Minute, want: 640},
			{op: "match", text: a, at: time.Minute + 1, want: 0},
		}},
		{name: "a keep-alive of forever", slots: 1, ttl: -1, steps: []step{
			{op: "record", text: a},
			{op: "match", text: a, at: 1000 * time.Hour, want: 640},
		}},
		{name: "reset", slots: 2, ttl: time.Hour, steps: []step{
			{op: "record", text: a},
			{op: "reset"},
			{op: "match", text: a, want: 0},
		}},
	}
	keyer, err := kvcache.NewKeyer(kvcache.Namespace{Model: "m"}, kvcache.KeyerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResidency(keyer, tt.slots, tt.ttl)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "record":
					r.record(r.chain("t", s.text), now)
				case "reset":
					r.reset()
				case "match":
					if got := r.match(r.chain("t", s.text), now); got != s.want {
						t.Errorf("step %d: match of %d bytes = %d, want %d", i, len(s.text), got, s.want)
					}
				}
			}
		})
	}
}

// TestCachedTokens: bytes held become tokens in proportion, and never the
// whole prompt.
func TestCachedTokens(t *testing.T) {
	tests := []struct {
		prompt, cached, text, want int
	}{
		{prompt: 1000, cached: 900, text: 1000, want: 900},
		{prompt: 250, cached: 900, text: 1000, want: 225},   // 4 bytes a token
		{prompt: 1000, cached: 1000, text: 1000, want: 999}, // Ollama recomputes the last token
		{prompt: 1000, cached: 2000, text: 1000, want: 999}, // a match past the text (cannot happen) is capped
		{prompt: 1000, cached: 0, text: 1000, want: 0},
		{prompt: 1, cached: 64, text: 64, want: 0},
		{prompt: 0, cached: 64, text: 64, want: 0},
		{prompt: 100, cached: 64, text: 0, want: 0},
	}
	for _, tt := range tests {
		if got := cachedTokens(tt.prompt, tt.cached, tt.text); got != tt.want {
			t.Errorf("cachedTokens(%d, %d, %d) = %d, want %d", tt.prompt, tt.cached, tt.text, got, tt.want)
		}
	}
}

// TestRatio: the likely token count is one per byte until a long enough
// prompt taught the backend its ratio.
func TestRatio(t *testing.T) {
	var r ratio
	if got := r.tokens(1000); got != 1000 {
		t.Errorf("unlearned: %d tokens for 1000 bytes, want 1000", got)
	}
	r.learn(30, 100) // too short to learn from
	if got := r.tokens(1000); got != 1000 {
		t.Errorf("after a short prompt: %d tokens for 1000 bytes, want 1000", got)
	}
	r.learn(1000, 4000)
	if got := r.tokens(1000); got != 250 {
		t.Errorf("learned 1/4: %d tokens for 1000 bytes, want 250", got)
	}
	r.learn(0, 4000) // a server that reported no count
	if got := r.tokens(1001); got != 251 {
		t.Errorf("after no count: %d tokens for 1001 bytes, want 251 (rounded up)", got)
	}
}
