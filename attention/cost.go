package attention

import (
	"errors"
	"fmt"

	"kvwin/gguf"
)

// ErrShape reports a model shape the cost model cannot use.
var ErrShape = errors.New("attention: model shape lacks layers, width or parameters")

// Cost is the compute and memory cost of one model, derived from its shape.
// It is a plain value: copy it freely, use it from any goroutine.
type Cost struct {
	Params          uint64 // weights, from the tensor table
	Layers          int
	Width           int    // d of the attention term: query heads · head dim
	KVBytesPerToken int    // K and V of one token in every layer
	WeightBytes     uint64 // bytes of weights read per decoded token; see EstimateWeightBytes
	CacheType       string // KV element type the byte figures assume
}

// NewCost derives the cost model of shape s with a KV cache of cacheType
// ("f16", "q8_0", "q4_0", "f32"; "" means f16). It fails if the shape lacks
// the numbers the model needs.
func NewCost(s gguf.Shape, cacheType string) (Cost, error) {
	if cacheType == "" {
		cacheType = "f16"
	}
	c := Cost{
		Params:          s.Params,
		Layers:          s.Layers,
		Width:           attentionWidth(s),
		KVBytesPerToken: s.KVBytesPerToken(cacheType),
		WeightBytes:     EstimateWeightBytes(s),
		CacheType:       cacheType,
	}
	if c.Params == 0 || c.Layers <= 0 || c.Width <= 0 {
		return Cost{}, fmt.Errorf("%w: params %d, layers %d, width %d", ErrShape, c.Params, c.Layers, c.Width)
	}
	return c, nil
}

// attentionWidth is heads·head_dim, which is what QKᵀ and AV multiply over.
// It equals the embedding length in most models but not all (Gemma's heads
// are wider than its residual stream), so the embedding is only a fallback.
func attentionWidth(s gguf.Shape) int {
	if s.Heads > 0 && s.HeadDim > 0 {
		return s.Heads * s.HeadDim
	}
	return s.Embedding
}

// LinearFLOPs is the weights term of prefilling p tokens: 2·params·p.
// It counts the token-embedding lookup as if it were a matrix product,
// which overstates untied-embedding models by 2·vocab·d per token; small
// next to the rest for any real model, and it keeps the term a function of
// the one number every GGUF file states exactly.
func (c Cost) LinearFLOPs(p int) float64 {
	return 2 * float64(c.Params) * float64(max(p, 0))
}

// AttentionFLOPs is the attention term of prefilling p tokens after cached
// ones: 4·layers·d·p·(cached + p/2). See the package comment for the 4.
func (c Cost) AttentionFLOPs(p, cached int) float64 {
	if p <= 0 {
		return 0
	}
	return 4 * float64(c.Layers) * float64(c.Width) * float64(p) * (float64(max(cached, 0)) + float64(p)/2)
}

// PrefillFLOPs is the compute of prefilling p new tokens after cached ones.
func (c Cost) PrefillFLOPs(p, cached int) float64 {
	return c.LinearFLOPs(p) + c.AttentionFLOPs(p, cached)
}

// AttentionShare is the fraction of PrefillFLOPs(p, cached) spent in
// attention, in [0, 1).
func (c Cost) AttentionShare(p, cached int) float64 {
	total := c.PrefillFLOPs(p, cached)
	if total == 0 {
		return 0
	}
	return c.AttentionFLOPs(p, cached) / total
}

// Crossover is the prompt length, from an empty cache, at which the
// attention term equals the weights term: params / (layers·d). Below it
// prefill time grows about linearly with the prompt, above it about
// quadratically. (gguf.Shape.Crossover gives the same with d = embedding.)
func (c Cost) Crossover() int {
	return int(c.Params / uint64(c.Layers*c.Width))
}

// KVBytes is the KV cache that tokens occupy.
func (c Cost) KVBytes(tokens int) uint64 {
	return uint64(max(tokens, 0)) * uint64(c.KVBytesPerToken)
}

// DecodeBytes is the memory read to generate one token with context tokens
// in the cache: every weight once, plus every cached K and V. Decoding is
// bandwidth-bound, so this divided by memory bandwidth bounds decode speed.
func (c Cost) DecodeBytes(context int) float64 {
	return float64(c.WeightBytes) + float64(c.KVBytes(context))
}

// Prior returns time coefficients derived from FLOPs alone, for a backend
// that sustains flops floating-point operations per second on prefill
// (roughly 2e10–5e10 per AVX2 CPU core, 1e13–1e14 for a data-centre GPU).
// It is what a Calibration predicts before it has observations of its own.
// C0 is zero: fixed per-request overhead is not a property of the model.
func (c Cost) Prior(flops float64) Coefficients {
	if flops <= 0 {
		return Coefficients{}
	}
	return Coefficients{
		A: 2 * float64(c.Params) / flops,
		B: 4 * float64(c.Layers) * float64(c.Width) / flops,
	}
}
