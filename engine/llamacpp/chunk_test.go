package llamacpp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

func TestChunkNeverLeavesALoneLastToken(t *testing.T) {
	for _, tt := range []struct{ remaining, room, want int }{
		{1024, 512, 512},
		{512, 512, 512},
		{513, 512, 511}, // 511 now, 2 last
		{2, 512, 2},
		{1, 512, 1}, // a one-token prompt
		{3, 2, 1},   // 1 now, 2 last
		{2, 1, 1},   // a cache with room for one row still makes progress
		{5, 0, 0},
	} {
		if got := chunk(tt.remaining, tt.room); got != tt.want {
			t.Errorf("chunk(%d, %d) = %d, want %d", tt.remaining, tt.room, got, tt.want)
		}
	}
	for n := 2; n < 40; n++ {
		for room := 2; room < 12; room++ {
			for left := n; left > 0; {
				c := chunk(left, room)
				if left -= c; left == 1 {
					t.Fatalf("prompt %d, batch %d: a last chunk of one token", n, room)
				}
			}
		}
	}
}

// The engine's determinism (chunk.go) rests on this property of llama.cpp:
// a row's logits do not depend on the batch around it once it has two rows
// or more. A binding upgrade that breaks it fails here first.
func TestLastTokenLogitsDependOnlyOnABatchOfTwoOrMore(t *testing.T) {
	b, err := NewBaseline(Config{ModelPath: tinyPath, Slots: 1, Ctx: 1024, Threads: testThreads()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int, 700)
	for i := range prompt {
		prompt[i] = 'a' + rng.IntN(26)
	}
	batch, err := llama.NewBatch(BaselineBatch, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Free()
	vocab := b.model.NumVocab()
	// logits decodes the prompt in chunks of size, the last `last` tokens
	// in a batch of their own, and returns the last token's logits.
	logits := func(last, size int) []float32 {
		b.lctx.KvCacheClear()
		decode := func(from, to int) {
			batch.Clear()
			for j := from; j < to; j++ {
				batch.Add(prompt[j], nil, j, j == len(prompt)-1, 0)
			}
			if err := b.lctx.Decode(batch); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < len(prompt)-last; i += size {
			decode(i, min(i+size, len(prompt)-last))
		}
		decode(len(prompt)-last, len(prompt))
		return logitsRow(b.lctx, last-1, vocab)
	}
	want := logits(2, 512)
	for _, c := range [][2]int{{3, 512}, {16, 100}, {64, 512}, {188, 512}, {512, 512}} {
		if got := logits(c[0], c[1]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("last chunk of %d after chunks of %d: logits differ from a last chunk of 2", c[0], c[1])
		}
	}
	// Alone in its batch the row takes other kernels. If this starts to
	// hold too, lastChunk could become 1.
	if got := logits(1, 512); fmt.Sprint(got) == fmt.Sprint(want) {
		t.Logf("a one-row batch now gives the same logits as a batch of two")
	}
}

func TestColdPromptTakesOneDecodePerBatch(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 2, Ctx: 2048, Batch: 256})
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tt := range []struct{ tokens, decodes int }{
		{1024, 4},     // 4 × 256, the last token's logits in the fourth
		{1025, 5},     // 256, 256, 256, 255, then the last 2 together
		{257, 2},      // 255, 2
		{1, 1},        // a one-token prompt
		{2000, 8},     // ceil(2000 / 256)
		{300, 2},      // 256, 44
		{1024 + 1, 5}, // again, into the other slot
	} {
		prompt := make([]int, tt.tokens)
		for i := range prompt {
			prompt[i] = 'a' + rng.IntN(26)
		}
		req := greedy(1)
		req.Tokens, req.NoCache = prompt, true
		before, decodedBefore := e.Stats().Decodes.Load(), e.Stats().PromptDecoded.Load()
		res, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != 1 && res.FinishReason != engine.FinishStop {
			t.Fatalf("%d tokens: generated %v (%s)", tt.tokens, res.Tokens, res.FinishReason)
		}
		if got := e.Stats().Decodes.Load() - before; got != int64(tt.decodes) {
			t.Errorf("%d-token cold prompt took %d decodes, want %d", tt.tokens, got, tt.decodes)
		}
		if got := e.Stats().PromptDecoded.Load() - decodedBefore; got != int64(tt.tokens) {
			t.Errorf("%d-token cold prompt decoded %d prompt tokens", tt.tokens, got)
		}
	}
}

// The same seed must give the same answer whether the prompt's last chunk
// is a short suffix after a cached prefix or the end of a long cold chunk:
// the first token's logits are bit-identical, and so the sampled tokens.
func TestSampledAnswerIsTheSameCachedOrCold(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	prefix := make([]int, 700)
	for i := range prefix {
		prefix[i] = 'a' + rng.IntN(26)
	}
	sampled := func(e *Engine, prompt []int, noCache bool) engine.Result {
		t.Helper()
		req := greedy(24)
		req.Sampling.Temperature, req.Sampling.TopK, req.Sampling.TopP, req.Sampling.MinP = 1, 0, 1, 0
		req.Sampling.Seed = 9
		req.Tokens, req.NoCache = prompt, noCache
		res, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var logits [][]float32
	firstLogits = func(l []float32) { logits = append(logits, l) } // called on the loop; read after Generate returns
	t.Cleanup(func() { firstLogits = nil })
	warm := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	cold := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	sampled(warm, prefix, false)
	for _, suffix := range []int{0, 1, 40, 300} {
		prompt := append(append([]int(nil), prefix...), make([]int, suffix)...)
		for i := len(prefix); i < len(prompt); i++ {
			prompt[i] = 'a' + rng.IntN(26)
		}
		w := sampled(warm, prompt, false)
		c := sampled(cold, prompt, true)
		if n := len(logits); fmt.Sprint(logits[n-2]) != fmt.Sprint(logits[n-1]) {
			t.Errorf("suffix %d: the first token's logits differ cached and cold", suffix)
		}
		if want := len(prompt) - max(suffix, lastChunk); w.Timings.CachedTokens != want || c.Timings.CachedTokens != 0 {
			t.Fatalf("suffix %d: cached %d warm (want %d), %d cold (want 0)", suffix, w.Timings.CachedTokens, want, c.Timings.CachedTokens)
		}
		if fmt.Sprint(w.Tokens) != fmt.Sprint(c.Tokens) {
			t.Errorf("suffix %d: sampled answers differ:\ncached %v\ncold   %v", suffix, w.Tokens, c.Tokens)
		}
		sampled(warm, prefix, false) // the prefix cached again, without the suffix
	}
}
