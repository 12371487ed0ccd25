package llamacpp

import (
	"context"
	"fmt"
	"testing"

	"kvwin/engine"
)

func TestFindRun(t *testing.T) {
	seq := func(from, n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = from + i
		}
		return s
	}
	held := append(seq(0, 20), seq(500, 100)...)  // prefix 0..19, then a run 500..599
	prompt := append(seq(0, 20), seq(540, 40)...) // the prefix, then 540..579, then the last chunk
	prompt = append(prompt, 9998, 9999)
	tests := []struct {
		name         string
		from, start  int
		wantJ, wantM int
	}{
		{"finds the continuation further on", 20, 21, 60, 40},
		{"not before start", 20, 61, -1, 0},
		{"too little prompt left", len(prompt) - 10, 21, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, m := findRun(held, prompt, tt.from, tt.start)
			if j != tt.wantJ || m != tt.wantM {
				t.Fatalf("findRun = %d, %d; want %d, %d", j, m, tt.wantJ, tt.wantM)
			}
		})
	}
}

// history builds a conversation: a system prompt and first exchange (the
// sinks), then n turns.
func history(seed, n int) []engine.Message {
	msgs := []engine.Message{{Role: "system", Content: text(seed, 200)}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}
	for i := range n {
		msgs = append(msgs, engine.Message{Role: "user", Content: fmt.Sprintf("turn %d %s", i, text(seed+i+1, 150))},
			engine.Message{Role: "assistant", Content: "ok " + text(seed+i+50, 40)})
	}
	return msgs
}

// evict drops turns [1, k) after the sinks, as a window step does.
func evict(msgs []engine.Message, k int) []engine.Message {
	out := append([]engine.Message{}, msgs[:3]...)
	return append(out, msgs[3+2*k:]...)
}

func TestShiftReusesKeptHistoryAfterAnEviction(t *testing.T) {
	full := history(1, 8)
	ask := engine.Message{Role: "user", Content: "and now?"}
	for _, shift := range []bool{false, true} {
		t.Run(fmt.Sprintf("shift=%v", shift), func(t *testing.T) {
			e := newTestEngine(t, Config{Slots: 1, Ctx: 4096})
			chat(t, e, full, 2)
			req := greedy(2)
			req.Messages, req.Shift = append(evict(full, 4), ask), shift
			sinks, _ := e.prompt(engine.Request{Messages: full[:3]})
			before := e.Stats().PromptDecoded.Load()
			res, err := e.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			cached, prompt := res.Timings.CachedTokens, res.Timings.PromptTokens
			decoded := e.Stats().PromptDecoded.Load() - before
			if decoded != int64(prompt-cached) {
				t.Fatalf("decoded %d, prompt − cached = %d", decoded, prompt-cached)
			}
			// The sinks are reused either way (up to the "\n<|im_start|>" after them).
			if !shift && (cached > len(sinks)+1 || e.Stats().Shifts.Load() != 0) {
				t.Fatalf("without shift: cached %d of %d (sinks %d), shifts %d", cached, prompt, len(sinks), e.Stats().Shifts.Load())
			}
			if shift && (cached < prompt-40 || e.Stats().Shifts.Load() != 1) { // all but the new ask
				t.Fatalf("with shift: cached %d of %d, shifts %d: the kept turns should have moved", cached, prompt, e.Stats().Shifts.Load())
			}
			// A request that does not allow shifting never reuses shifted KV.
			plain := greedy(2)
			plain.Messages = req.Messages
			res2, err := e.Generate(context.Background(), plain, nil)
			if err != nil {
				t.Fatal(err)
			}
			if shift && res2.Timings.CachedTokens > len(sinks)+1 {
				t.Fatalf("an unshifting request reused %d tokens of shifted KV", res2.Timings.CachedTokens)
			}
		})
	}
}

// Forked cells are shared: shifting one conversation must not move the
// other's. B's answers after A shifted match a cold engine's.
func TestShiftNeverMovesAnotherSlotsCells(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 2, Ctx: 4096})
	a := history(3, 8)
	b := append([]engine.Message{}, a[:3]...) // same sinks: B forks them from A's slot
	b = append(b, engine.Message{Role: "user", Content: text(77, 300)})
	chat(t, e, a, 2)
	chat(t, e, b, 2)
	req := greedy(2)
	req.Messages, req.Shift = append(evict(a, 4), engine.Message{Role: "user", Content: "next"}), true
	if _, err := e.Generate(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if e.Stats().Shifts.Load() != 1 || e.Stats().Forks.Load() == 0 {
		t.Fatalf("shifts %d, forks %d: the test needs both", e.Stats().Shifts.Load(), e.Stats().Forks.Load())
	}
	b = append(b, engine.Message{Role: "assistant", Content: "x"}, engine.Message{Role: "user", Content: "more"})
	warm := chat(t, e, b, 24)
	cold := chat(t, newTestEngine(t, Config{Slots: 1, Ctx: 4096}), b, 24)
	if warm.Text != cold.Text {
		t.Fatalf("B after A's shift answered %q, a cold engine %q", warm.Text, cold.Text)
	}
}
