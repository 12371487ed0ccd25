package kvcache

import "fmt"

// Budget is a backend's KV room, from which its capacity in blocks follows.
// Either Blocks is configured, or the room is Context × Slots tokens (what
// the engine allocates: --ctx is per slot, docs/architecture.md, "Flags"),
// optionally capped by MaxBytes of KV at BytesPerToken (the attention package
// computes it from the model's shape: 2 · layers · kv_heads · head_dim · bytes
// per element).
type Budget struct {
	Blocks        int   `json:"blocks"`          // a configured count; wins when > 0
	Context       int   `json:"context"`         // tokens per slot
	Slots         int   `json:"slots"`           // slots sharing the KV
	BytesPerToken int64 `json:"bytes_per_token"` // KV bytes one token takes
	MaxBytes      int64 `json:"max_bytes"`       // KV bytes available; 0: no cap
}

// CapacityBlocks returns how many full blocks of blockTokens fit the budget.
// A partial block does not count: a block is held whole or not at all. It
// fails on negative fields, a cap without BytesPerToken, or no room at all.
func (b Budget) CapacityBlocks(blockTokens int) (int, error) {
	if blockTokens < 1 || b.Blocks < 0 || b.Context < 0 || b.Slots < 0 || b.BytesPerToken < 0 || b.MaxBytes < 0 {
		return 0, fmt.Errorf("kvcache: budget %+v for blocks of %d: %w", b, blockTokens, ErrInvalidConfig)
	}
	if b.Blocks > 0 {
		return b.Blocks, nil
	}
	if b.MaxBytes > 0 && b.BytesPerToken == 0 {
		return 0, fmt.Errorf("kvcache: budget caps KV at %d bytes but gives no bytes per token: %w", b.MaxBytes, ErrInvalidConfig)
	}
	tokens := int64(b.Context) * int64(b.Slots)
	if b.MaxBytes > 0 {
		byBytes := b.MaxBytes / b.BytesPerToken
		if tokens == 0 || byBytes < tokens {
			tokens = byBytes
		}
	}
	blocks := tokens / int64(blockTokens)
	if blocks == 0 {
		return 0, fmt.Errorf("kvcache: budget %+v holds no block of %d tokens: %w", b, blockTokens, ErrInvalidConfig)
	}
	return int(blocks), nil
}
