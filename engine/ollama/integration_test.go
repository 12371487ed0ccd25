//go:build linux

package ollama

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/engine/ollama/ollamatest"
	"kvwin/gguf"
)

// tinyModel is the name the test model is imported under.
const tinyModel = ollamatest.TinyModel

// TestRealOllama runs a two-turn conversation through the adapter against
// a real `ollama serve` on the generated test model and checks Ollama's
// prefix cache at work: turn 2 (turn 1, its answer and a short new
// message) reuses all of turn 1's prompt, by the count of reused tokens
// Ollama's runner logs, and the adapter estimated almost all of turn 1 as
// cached.
func TestRealOllama(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := ollamatest.Start(t, ctx)

	b, err := New(Config{
		BaseURL: base, Model: tinyModel, Slots: 1,
		// One compute thread: the machine's 2 cores are shared, and ggml
		// threads spin-wait.
		Options: map[string]any{"num_thread": 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	t.Run("unknown model", func(t *testing.T) {
		nb, err := New(Config{BaseURL: base, Model: "no-such-model"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nb.Close()
		_, err = nb.Generate(ctx, engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Slot: -1}, nil)
		if !errors.Is(err, engine.ErrUnknownModel) {
			t.Fatalf("error %v, want engine.ErrUnknownModel", err)
		}
	})

	// About 2,000 tokens: the test model's vocabulary is one token a byte.
	system := engine.Message{Role: engine.RoleSystem, Content: longText(1900)}
	turn1 := []engine.Message{system, {Role: engine.RoleUser, Content: "Describe the harbour at dawn, the boats, the gulls and the light."}}
	sampling := engine.Sampling{Temperature: 0, TopK: 40, TopP: 1, MinP: 0, RepeatPenalty: 1, RepeatLastN: 64, Seed: 42}

	r1, first1 := generate(t, ctx, b, turn1, sampling)
	turn2 := append(append([]engine.Message(nil), turn1...),
		engine.Message{Role: engine.RoleAssistant, Content: r1.Text},
		engine.Message{Role: engine.RoleUser, Content: "And at dusk?"})
	r2, first2 := generate(t, ctx, b, turn2, sampling)

	t1, t2 := r1.Timings, r2.Timings
	t.Logf("turn 1: prompt %d tokens (estimated cached %d), prompt_eval_duration %v, first token %v, %d generated",
		t1.PromptTokens, t1.CachedTokens, t1.PromptEval, t1.FirstToken, t1.GeneratedTokens)
	t.Logf("turn 2: prompt %d tokens (estimated cached %d), prompt_eval_duration %v, first token %v, %d generated",
		t2.PromptTokens, t2.CachedTokens, t2.PromptEval, t2.FirstToken, t2.GeneratedTokens)
	t.Logf("prompt_eval_duration turn 1 / turn 2 = %.1f", float64(t1.PromptEval)/float64(max(t2.PromptEval, 1)))

	if info := b.Info(); info.ContextSlot != gguf.DefaultTinyConfig().Context || info.Slots != 1 || info.Model != tinyModel {
		t.Errorf("Info %+v, want the model's context %d, 1 slot, model %s", info, gguf.DefaultTinyConfig().Context, tinyModel)
	}
	if t1.PromptTokens < 1900 || t2.PromptTokens <= t1.PromptTokens {
		t.Errorf("prompt tokens %d then %d: want ~2,000, then more", t1.PromptTokens, t2.PromptTokens)
	}
	if t1.PromptEval <= 0 || t2.PromptEval <= 0 {
		t.Fatalf("prompt_eval_duration %v, %v: Ollama reported none", t1.PromptEval, t2.PromptEval)
	}
	// Ollama's prefix cache at work, by its runner's own count (the
	// durations above are logged, not asserted: the machine is shared).
	if loads := ollamatest.CacheLoads(t, base); len(loads) < 2 {
		t.Errorf("Ollama's runner logged %d cache placements, want 2", len(loads))
	} else if l1, l2 := loads[len(loads)-2], loads[len(loads)-1]; l1.Used != 0 || l2.Used < l1.Prompt {
		t.Errorf("Ollama's cache: turn 1 reused %d of %d tokens, turn 2 %d of %d: want turn 2 to reuse all of turn 1's prompt",
			l1.Used, l1.Prompt, l2.Used, l2.Prompt)
	}
	if t1.CachedTokens != 0 {
		t.Errorf("turn 1: %d tokens estimated cached, want 0 (nothing ran before)", t1.CachedTokens)
	}
	if !t2.CachedEstimated || !first2.CachedEstimated || !first1.CachedEstimated {
		t.Errorf("CachedEstimated %v (first events %v, %v), want true", t2.CachedEstimated, first1.CachedEstimated, first2.CachedEstimated)
	}
	if t2.CachedTokens < t1.PromptTokens*9/10 || t2.CachedTokens >= t2.PromptTokens {
		t.Errorf("turn 2: %d tokens estimated cached of %d, want at least 90%% of turn 1's %d and less than the prompt",
			t2.CachedTokens, t2.PromptTokens, t1.PromptTokens)
	}
}

// generate runs one turn and returns the result and the first event's
// timings.
func generate(t *testing.T, ctx context.Context, b *Backend, msgs []engine.Message, s engine.Sampling) (engine.Result, engine.Timings) {
	t.Helper()
	var first engine.Timings
	events := 0
	res, err := b.Generate(ctx, engine.Request{Messages: msgs, MaxTokens: 16, Sampling: s, Slot: -1}, func(ev engine.Event) error {
		if ev.First != (events == 0) {
			t.Errorf("event %d: First %v", events, ev.First)
		}
		if ev.First {
			first = ev.Timings
		}
		events++
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return res, first
}

// longText is n bytes of varied, deterministic prose.
func longText(n int) string {
	words := []string{"the", "harbour", "wakes", "slowly", "while", "nets", "dry", "on", "stone", "walls", "and",
		"a", "bell", "rings", "twice", "over", "grey", "water", "where", "gulls", "circle", "boats", "at", "anchor"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/len(words))%len(words)])
		if i%13 == 12 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}
