package attention

import (
	"errors"
	"math"
	"testing"

	"kvwin/gguf"
)

// llama8B is Llama-3-8B's shape as its GGUF states it, at Q4_K_M.
var llama8B = gguf.Shape{
	Name: "llama-3-8b", Architecture: "llama", Layers: 32, Embedding: 4096, FeedForward: 14336,
	Heads: 32, KVHeads: 8, HeadDim: 128, ContextLength: 8192, VocabSize: 128256,
	FileType: "Q4_K_M", Params: 8030261248,
}

// wideHeads has heads wider than its residual stream, as Gemma does:
// 8 heads × 256 = 2,048 against an embedding of 1,536.
var wideHeads = gguf.Shape{
	Layers: 2, Embedding: 1536, Heads: 8, KVHeads: 1, HeadDim: 256, Params: 1_000_000, FileType: "F16",
}

func mustCost(t *testing.T, s gguf.Shape, cacheType string) Cost {
	t.Helper()
	c, err := NewCost(s, cacheType)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func TestCostFigures(t *testing.T) {
	l8 := mustCost(t, llama8B, "")
	l8q := mustCost(t, llama8B, "q8_0")
	wide := mustCost(t, wideHeads, "f16")
	tests := []struct {
		name      string
		got, want float64
	}{
		// 2 · 32 layers · 8 kv heads · 128 · 2 bytes.
		{"llama 8B KV bytes/token f16", float64(l8.KVBytesPerToken), 131072},
		// q8_0 stores 32 elements in 34 bytes.
		{"llama 8B KV bytes/token q8_0", float64(l8q.KVBytesPerToken), 2 * 32 * 8 * 128 * 34.0 / 32},
		{"llama 8B KV of 1,000 tokens", float64(l8.KVBytes(1000)), 131072000},
		{"llama 8B width", float64(l8.Width), 4096},
		// One token from empty: 2·params + 4·32·4096·1·(0 + 1/2).
		{"prefill 1 token", l8.PrefillFLOPs(1, 0), 2*8030261248 + 4*32*4096*0.5},
		// 1,000 tokens after 3,000: 2·params·1000 + 4·32·4096·1000·3500.
		{"prefill 1000 after 3000", l8.PrefillFLOPs(1000, 3000), 2*8030261248*1000.0 + 4*32*4096*1000*3500.0},
		{"linear term alone", l8.LinearFLOPs(1000), 2 * 8030261248 * 1000.0},
		{"attention term alone", l8.AttentionFLOPs(1000, 3000), 4 * 32 * 4096 * 1000 * 3500.0},
		{"nothing to compute", l8.PrefillFLOPs(0, 3000), 0},
		{"negative cached counts as none", l8.PrefillFLOPs(10, -5), l8.PrefillFLOPs(10, 0)},
		// params / (layers · d) = 8030261248 / 131072.
		{"crossover", float64(l8.Crossover()), 61266},
		// Q4_K_M ≈ 4.85 bits per weight.
		{"weight bytes", float64(l8.WeightBytes), 4868345881},
		{"decode bytes at 8k context", l8.DecodeBytes(8192), float64(l8.WeightBytes) + 8192*131072},
		// Width counts query heads × head dim, not the embedding.
		{"wide heads width", float64(wide.Width), 2048},
		{"wide heads crossover", float64(wide.Crossover()), 1_000_000 / (2 * 2048)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !near(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// The attention share must fall below a half before the crossover and rise
// above it after; cached context moves the crossover earlier.
func TestAttentionShareCrossesAtCrossover(t *testing.T) {
	c := mustCost(t, llama8B, "")
	x := c.Crossover()
	// The crossover is rounded down to a whole token, hence the tolerance.
	if got := c.AttentionShare(x, 0); math.Abs(got-0.5) > 1e-4 {
		t.Errorf("AttentionShare at the crossover %d = %v, want 0.5", x, got)
	}
	tests := []struct {
		p, cached int
		above     bool
	}{
		{x / 2, 0, false},
		{2 * x, 0, true},
		{x / 2, x, true},
		{1, 0, false},
	}
	for _, tc := range tests {
		if got := c.AttentionShare(tc.p, tc.cached); (got > 0.5) != tc.above {
			t.Errorf("AttentionShare(%d, %d) = %.3f, want above one half %v", tc.p, tc.cached, got, tc.above)
		}
	}
}

// The cost model's crossover agrees with gguf's wherever heads·head_dim is
// the embedding, as in the test model.
func TestCrossoverAgreesWithShape(t *testing.T) {
	s := gguf.DefaultTinyConfig().Shape()
	if got, want := mustCost(t, s, "").Crossover(), s.Crossover(); got != want {
		t.Errorf("Cost.Crossover %d, gguf.Shape.Crossover %d", got, want)
	}
}

func TestNewCostRejectsEmptyShapes(t *testing.T) {
	tests := []struct {
		name string
		s    gguf.Shape
	}{
		{"zero shape", gguf.Shape{}},
		{"no params", gguf.Shape{Layers: 2, Embedding: 64}},
		{"no layers", gguf.Shape{Embedding: 64, Params: 1000}},
		{"no width", gguf.Shape{Layers: 2, Params: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewCost(tc.s, ""); !errors.Is(err, ErrShape) {
				t.Errorf("NewCost = %v, want ErrShape", err)
			}
		})
	}
}

func TestPrior(t *testing.T) {
	c := mustCost(t, llama8B, "")
	tests := []struct {
		name  string
		flops float64
		want  Coefficients
	}{
		{"1e14 FLOP/s", 1e14, Coefficients{A: 2 * 8030261248 / 1e14, B: 4 * 32 * 4096 / 1e14}},
		{"no rate", 0, Coefficients{}},
		{"negative rate", -1, Coefficients{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Prior(tc.flops)
			if !near(got.A, tc.want.A) || !near(got.B, tc.want.B) || got.C0 != tc.want.C0 {
				t.Errorf("Prior(%g) = %+v, want %+v", tc.flops, got, tc.want)
			}
		})
	}
	// The prior's time is FLOPs over the rate.
	if got, want := c.Prior(1e14).Seconds(4096, 1000), c.PrefillFLOPs(4096, 1000)/1e14; !near(got, want) {
		t.Errorf("prior predicts %g s, FLOPs/rate is %g s", got, want)
	}
}

func TestBitsPerWeight(t *testing.T) {
	tests := []struct {
		fileType string
		want     float64
		known    bool
	}{
		{"F16", 16, true},
		{"f32", 32, true},
		{"Q4_0", 4.5, true},
		{"Q8_0", 8.5, true},
		{"q4_k_m", 4.85, true},
		{"unknown", 16, false},
		{"", 16, false},
	}
	for _, tc := range tests {
		t.Run(tc.fileType, func(t *testing.T) {
			got, known := BitsPerWeight(tc.fileType)
			if got != tc.want || known != tc.known {
				t.Errorf("BitsPerWeight(%q) = %v, %v; want %v, %v", tc.fileType, got, known, tc.want, tc.known)
			}
		})
	}
}
