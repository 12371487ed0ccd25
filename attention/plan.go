package attention

import (
	"errors"
	"fmt"

	"kvwin/gguf"
)

// ErrPlan reports an input NewPlan cannot plan with.
var ErrPlan = errors.New("attention: invalid plan input")

// planLengths are the prompt lengths a Plan reports prefill cost at: 1k,
// 8k, 32k and 128k tokens, in the binary thousands contexts are sized in.
var planLengths = []int{1 << 10, 8 << 10, 32 << 10, 128 << 10}

// Compute reserve. llama.cpp allocates, besides weights and KV, a compute
// buffer sized for its worst-case graph at one micro-batch, and the GPU
// runtime takes memory of its own. The reserve is:
//
//	512 MiB                      runtime: CUDA/ROCm context, BLAS workspace, fragmentation
//	+ 4 B · 512 · vocab          logits of a full 512-token micro-batch (f32)
//	+ 4 B · 512 · 2 · ff         the widest activations: FFN gate and up (f32)
//
// It assumes flash attention (llama-server -fa), whose attention scratch is
// small and independent of context. Without it llama.cpp materialises the
// scores, 4 B · 512 · heads · cached cells, which at long contexts needs
// gigabytes more: plan those with an explicit PlanConfig.Reserve.
const (
	runtimeReserve = 512 << 20
	planUBatch     = 512
)

// DefaultReserve is the compute reserve a Plan assumes for shape s.
func DefaultReserve(s gguf.Shape) uint64 {
	return runtimeReserve + 4*planUBatch*uint64(max(s.VocabSize, 0)+2*max(s.FeedForward, 0))
}

// tokenAlign is what the planned total context is rounded down to:
// llama.cpp rounds n_ctx up to a multiple of 256 under flash attention, so
// an unaligned figure would allocate more than planned.
const tokenAlign = 256

// PlanConfig is the input of NewPlan besides the model's shape.
type PlanConfig struct {
	VRAM  uint64 // bytes of device memory for this model (required)
	Slots int    // parallel sequences sharing the KV cache; default 1
	// CacheType is the KV element type: "f16" (default), "q8_0", "q4_0", "f32".
	CacheType string
	// WeightBytes overrides the estimate from params and file type; the GGUF
	// file's size is a close upper bound (it adds only metadata).
	WeightBytes uint64
	// Reserve overrides DefaultReserve.
	Reserve uint64
	// FLOPS, if set, is the sustained prefill rate used to estimate prefill
	// times in the plan (FLOPs ÷ FLOPS; real prefill is slower where
	// attention runs below the matrix-multiply rate).
	FLOPS float64
}

// PrefillPoint is the cost of prefilling Tokens tokens into an empty cache.
type PrefillPoint struct {
	Tokens         int     `json:"tokens"`
	FLOPs          float64 `json:"flops"`
	LinearFLOPs    float64 `json:"linear_flops"`
	AttentionFLOPs float64 `json:"attention_flops"`
	AttentionShare float64 `json:"attention_share"`
	Seconds        float64 `json:"seconds,omitempty"` // FLOPs ÷ PlanConfig.FLOPS, if given
}

// Plan is how a model fits in a given device memory and what its prefill
// costs. The JSON names are part of `kvwin gguf inspect --json`.
type Plan struct {
	Model           string  `json:"model,omitempty"`
	VRAM            uint64  `json:"vram_bytes"`
	Slots           int     `json:"slots"`
	CacheType       string  `json:"cache_type"`
	WeightBytes     uint64  `json:"weight_bytes"`
	WeightEstimated bool    `json:"weight_bytes_estimated"`
	BitsPerWeight   float64 `json:"bits_per_weight"`
	ReserveBytes    uint64  `json:"reserve_bytes"`
	KVBytes         uint64  `json:"kv_bytes"` // VRAM − weights − reserve, 0 if that is negative
	KVBytesPerToken int     `json:"kv_bytes_per_token"`
	// Fits is false when weights and reserve alone exceed the VRAM.
	Fits bool `json:"fits"`
	// TokensTotal is the KV cache in tokens, rounded down to a multiple of
	// 256; TokensPerSlot its share per slot. UsablePerSlot caps that at the
	// model's trained context (0 when the file does not state one).
	TokensTotal    int `json:"tokens_total"`
	TokensPerSlot  int `json:"tokens_per_slot"`
	TrainedContext int `json:"trained_context"`
	UsablePerSlot  int `json:"usable_tokens_per_slot"`
	Crossover      int `json:"crossover_tokens"`
	// Prefill is the cost of 1k, 8k, 32k and 128k tokens (1,024 … 131,072).
	Prefill []PrefillPoint `json:"prefill"`
}

// NewPlan plans shape s into cfg.VRAM. It fails on a zero VRAM, a negative
// slot count or a shape the cost model cannot use; a model that does not
// fit is a valid plan with Fits false.
func NewPlan(s gguf.Shape, cfg PlanConfig) (Plan, error) {
	if cfg.VRAM == 0 {
		return Plan{}, fmt.Errorf("%w: no VRAM size", ErrPlan)
	}
	if cfg.Slots < 0 {
		return Plan{}, fmt.Errorf("%w: slots %d below 1", ErrPlan, cfg.Slots)
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1
	}
	cost, err := NewCost(s, cfg.CacheType)
	if err != nil {
		return Plan{}, err
	}
	if cost.KVBytesPerToken <= 0 {
		return Plan{}, fmt.Errorf("%w: shape has no KV heads or head dim", ErrPlan)
	}
	p := Plan{
		Model: s.Name, VRAM: cfg.VRAM, Slots: cfg.Slots, CacheType: cost.CacheType,
		WeightBytes: cfg.WeightBytes, ReserveBytes: cfg.Reserve,
		KVBytesPerToken: cost.KVBytesPerToken, TrainedContext: s.ContextLength,
		Crossover: cost.Crossover(),
	}
	p.BitsPerWeight, _ = BitsPerWeight(s.FileType)
	if p.WeightBytes == 0 {
		p.WeightBytes, p.WeightEstimated = cost.WeightBytes, true
	} else if s.Params > 0 {
		p.BitsPerWeight = float64(p.WeightBytes) * 8 / float64(s.Params)
	}
	if p.ReserveBytes == 0 {
		p.ReserveBytes = DefaultReserve(s)
	}
	if used := p.WeightBytes + p.ReserveBytes; used < p.VRAM {
		p.Fits = true
		p.KVBytes = p.VRAM - used
		total := p.KVBytes / uint64(p.KVBytesPerToken)
		p.TokensTotal = int(total / tokenAlign * tokenAlign)
		p.TokensPerSlot = p.TokensTotal / p.Slots
	}
	p.UsablePerSlot = p.TokensPerSlot
	if p.TrainedContext > 0 {
		p.UsablePerSlot = min(p.UsablePerSlot, p.TrainedContext)
	}
	for _, n := range planLengths {
		pt := PrefillPoint{
			Tokens: n, FLOPs: cost.PrefillFLOPs(n, 0), LinearFLOPs: cost.LinearFLOPs(n),
			AttentionFLOPs: cost.AttentionFLOPs(n, 0), AttentionShare: cost.AttentionShare(n, 0),
		}
		if cfg.FLOPS > 0 {
			pt.Seconds = pt.FLOPs / cfg.FLOPS
		}
		p.Prefill = append(p.Prefill, pt)
	}
	return p, nil
}
