package attention

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"kvwin/gguf"
)

func TestNewPlan(t *testing.T) {
	f16 := llama8B
	f16.FileType = "F16"
	longCtx := llama8B
	longCtx.ContextLength = 131072
	tests := []struct {
		name string
		s    gguf.Shape
		cfg  PlanConfig
		want Plan // only the fields checked below
	}{
		{
			// weights 8030261248 · 4.85 / 8 = 4,868,345,881 B; reserve
			// 512 MiB + 4·512·(128256 + 2·14336) = 858,259,456 B; KV
			// 24 GiB − both = 20,043,198,439 B = 152,917 tokens of 128 KiB,
			// 152,832 rounded down to 256, 38,208 per slot; the trained
			// context (8,192) caps what a slot can use.
			name: "llama 8B Q4_K_M in 24 GiB, 4 slots",
			s:    llama8B, cfg: PlanConfig{VRAM: 24 << 30, Slots: 4},
			want: Plan{
				Fits: true, WeightBytes: 4868345881, WeightEstimated: true, ReserveBytes: 858259456,
				KVBytes: 20043198439, KVBytesPerToken: 131072, TokensTotal: 152832,
				TokensPerSlot: 38208, UsablePerSlot: 8192, Slots: 4, CacheType: "f16",
			},
		},
		{
			name: "trained context larger than a slot",
			s:    longCtx, cfg: PlanConfig{VRAM: 24 << 30, Slots: 4},
			want: Plan{
				Fits: true, WeightBytes: 4868345881, WeightEstimated: true, ReserveBytes: 858259456,
				KVBytes: 20043198439, KVBytesPerToken: 131072, TokensTotal: 152832,
				TokensPerSlot: 38208, UsablePerSlot: 38208, Slots: 4, CacheType: "f16",
			},
		},
		{
			// q8_0 halves (about) the KV: 20,043,198,439 / 69,632 = 287,844
			// tokens → 287,744; one slot by default.
			name: "q8_0 cache, default one slot",
			s:    longCtx, cfg: PlanConfig{VRAM: 24 << 30, CacheType: "q8_0"},
			want: Plan{
				Fits: true, WeightBytes: 4868345881, WeightEstimated: true, ReserveBytes: 858259456,
				KVBytes: 20043198439, KVBytesPerToken: 69632, TokensTotal: 287744,
				TokensPerSlot: 287744, UsablePerSlot: 131072, Slots: 1, CacheType: "q8_0",
			},
		},
		{
			// Given weights (the file's size) and reserve replace the
			// estimates: 16 GiB − 5 GiB − 1 GiB = 10 GiB = 81,920 tokens.
			name: "file size and reserve given",
			s:    longCtx, cfg: PlanConfig{VRAM: 16 << 30, Slots: 2, WeightBytes: 5 << 30, Reserve: 1 << 30},
			want: Plan{
				Fits: true, WeightBytes: 5 << 30, ReserveBytes: 1 << 30,
				KVBytes: 10 << 30, KVBytesPerToken: 131072, TokensTotal: 81920,
				TokensPerSlot: 40960, UsablePerSlot: 40960, Slots: 2, CacheType: "f16",
			},
		},
		{
			// 16 GB of f16 weights in an 8 GiB card.
			name: "weights do not fit",
			s:    f16, cfg: PlanConfig{VRAM: 8 << 30, Slots: 4},
			want: Plan{
				Fits: false, WeightBytes: 16060522496, WeightEstimated: true, ReserveBytes: 858259456,
				KVBytesPerToken: 131072, Slots: 4, CacheType: "f16",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(tc.s, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			type figures struct {
				Fits                                 bool
				Weight, Reserve, KV                  uint64
				Estimated                            bool
				PerToken, Total, PerSlot, Usable, Sl int
				Cache                                string
			}
			got := figures{p.Fits, p.WeightBytes, p.ReserveBytes, p.KVBytes, p.WeightEstimated, p.KVBytesPerToken, p.TokensTotal, p.TokensPerSlot, p.UsablePerSlot, p.Slots, p.CacheType}
			w := tc.want
			want := figures{w.Fits, w.WeightBytes, w.ReserveBytes, w.KVBytes, w.WeightEstimated, w.KVBytesPerToken, w.TokensTotal, w.TokensPerSlot, w.UsablePerSlot, w.Slots, w.CacheType}
			if got != want {
				t.Errorf("plan figures\n got %+v\nwant %+v", got, want)
			}
			if p.TokensTotal%256 != 0 {
				t.Errorf("total %d tokens is not a multiple of 256", p.TokensTotal)
			}
		})
	}
}

func TestPlanPrefillPoints(t *testing.T) {
	p, err := NewPlan(llama8B, PlanConfig{VRAM: 24 << 30, FLOPS: 1e14})
	if err != nil {
		t.Fatal(err)
	}
	c := mustCost(t, llama8B, "")
	want := []int{1024, 8192, 32768, 131072}
	if len(p.Prefill) != len(want) {
		t.Fatalf("%d prefill points, want %d", len(p.Prefill), len(want))
	}
	for i, pt := range p.Prefill {
		if pt.Tokens != want[i] {
			t.Errorf("point %d at %d tokens, want %d", i, pt.Tokens, want[i])
		}
		if !near(pt.FLOPs, c.PrefillFLOPs(pt.Tokens, 0)) || !near(pt.LinearFLOPs+pt.AttentionFLOPs, pt.FLOPs) {
			t.Errorf("point %+v disagrees with the cost model", pt)
		}
		if !near(pt.Seconds, pt.FLOPs/1e14) {
			t.Errorf("point %+v: seconds not FLOPs / 1e14", pt)
		}
	}
	// From empty, attention ÷ weights FLOPs = P ÷ crossover, so the share
	// is P / (P + crossover): 1.6% at 1k, 12% at 8k, 68% at 128k.
	x := 8030261248.0 / (32 * 4096)
	for _, pt := range p.Prefill {
		if want := float64(pt.Tokens) / (float64(pt.Tokens) + x); !near(pt.AttentionShare, want) {
			t.Errorf("attention share at %d tokens = %v, want %v", pt.Tokens, pt.AttentionShare, want)
		}
	}
}

func TestNewPlanRejects(t *testing.T) {
	tests := []struct {
		name string
		s    gguf.Shape
		cfg  PlanConfig
		want error
	}{
		{"no VRAM", llama8B, PlanConfig{Slots: 1}, ErrPlan},
		{"negative slots", llama8B, PlanConfig{VRAM: 1 << 30, Slots: -1}, ErrPlan},
		{"empty shape", gguf.Shape{}, PlanConfig{VRAM: 1 << 30}, ErrShape},
		{"no KV heads", gguf.Shape{Layers: 2, Embedding: 64, Params: 1000}, PlanConfig{VRAM: 1 << 30}, ErrPlan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPlan(tc.s, tc.cfg); !errors.Is(err, tc.want) {
				t.Errorf("NewPlan = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPlanWriteText(t *testing.T) {
	tests := []struct {
		name string
		cfg  PlanConfig
		want []string
		not  []string
	}{
		{
			name: "fits",
			cfg:  PlanConfig{VRAM: 24 << 30, Slots: 4},
			want: []string{
				"vram           24.0 GiB, 4 slot(s), f16 KV cache",
				"estimated from params and file type",
				"152,832 tokens at 128.0 KiB/token",
				"per slot       38,208 tokens (trained context 8,192: usable 8,192)",
				"crossover      61,266 tokens",
				"     1,024", "   131,072",
			},
			not: []string{"FLOP/s"},
		},
		{
			name: "does not fit, with a FLOP/s",
			cfg:  PlanConfig{VRAM: 4 << 30, FLOPS: 1e14},
			want: []string{"kv cache       none: weights and reserve need", "at the given FLOP/s", " s\n"},
			not:  []string{"per slot"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(llama8B, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := p.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, s := range tc.want {
				if !strings.Contains(out, s) {
					t.Errorf("text lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(out, s) {
					t.Errorf("text has %q:\n%s", s, out)
				}
			}
		})
	}
}

// The JSON names are a contract of `kvwin gguf inspect --json`.
func TestPlanJSONNames(t *testing.T) {
	p, err := NewPlan(llama8B, PlanConfig{VRAM: 24 << 30, Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"vram_bytes", "slots", "cache_type", "weight_bytes", "weight_bytes_estimated", "reserve_bytes",
		"kv_bytes", "kv_bytes_per_token", "fits", "tokens_total", "tokens_per_slot", "trained_context",
		"usable_tokens_per_slot", "crossover_tokens", "prefill",
	} {
		if _, ok := m[k]; !ok {
			t.Errorf("plan JSON lacks %q: %s", k, b)
		}
	}
	pt := m["prefill"].([]any)[0].(map[string]any)
	for _, k := range []string{"tokens", "flops", "linear_flops", "attention_flops", "attention_share"} {
		if _, ok := pt[k]; !ok {
			t.Errorf("prefill point lacks %q: %v", k, pt)
		}
	}
	if _, ok := pt["seconds"]; ok {
		t.Errorf("prefill point has seconds without a FLOP/s: %v", pt)
	}
}

func TestGroup(t *testing.T) {
	tests := map[int]string{0: "0", 999: "999", 1000: "1,000", 131072: "131,072", 1234567: "1,234,567", -4096: "-4,096"}
	for n, want := range tests {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}
