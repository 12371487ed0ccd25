package kvcache

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/ristretto/v2"
)

// TokenCacheConfig sizes a TokenCache. Zero fields take the defaults.
type TokenCacheConfig struct {
	// MaxTokens bounds the token ids held (4 bytes each); default 4,194,304
	// (16 MiB), a few hundred long conversations' histories.
	MaxTokens int64 `json:"max_tokens"`
	// Messages is the number of messages expected to be held; ristretto
	// keeps ten admission counters per message. Default MaxTokens / 64.
	Messages int64 `json:"messages"`
}

// TokenCache holds the token ids of chat messages, so a conversation's
// unchanged history is not re-tokenized on every turn. It is a ristretto
// cache: admission by frequency (TinyLFU) and cost = the number of tokens, so
// one huge message does not flush many small, often-repeated ones (system
// prompts). Writes are asynchronous and may be dropped; a miss only costs a
// tokenization. Safe for concurrent use; Close stops its goroutine.
type TokenCache struct {
	c            *ristretto.Cache[string, []int32]
	hits, misses atomic.Uint64
}

// NewTokenCache returns a TokenCache; the caller owns it and must Close it.
func NewTokenCache(cfg TokenCacheConfig) (*TokenCache, error) {
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 4 << 20
	}
	if cfg.Messages == 0 {
		cfg.Messages = max(1, cfg.MaxTokens/64)
	}
	if cfg.MaxTokens < 0 || cfg.Messages < 0 {
		return nil, fmt.Errorf("kvcache: token cache %+v: %w", cfg, ErrInvalidConfig)
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, []int32]{
		NumCounters: 10 * cfg.Messages,
		MaxCost:     cfg.MaxTokens,
		BufferItems: 64,
		// Costs are tokens, not bytes: ristretto's own per-item overhead
		// would otherwise be added to each cost in bytes.
		IgnoreInternalCost: true,
		KeyToHash:          splitKey,
	})
	if err != nil {
		return nil, fmt.Errorf("kvcache: token cache: %w", err)
	}
	return &TokenCache{c: c}, nil
}

// Append appends the cached token ids of (tokenizer, role, content) to dst
// and reports whether they were cached. tokenizer names what the ids depend
// on: the model's vocabulary and the chat template that renders the message.
func (t *TokenCache) Append(dst []int, tokenizer, role, content string) ([]int, bool) {
	ids, ok := t.c.Get(messageKey(tokenizer, role, content))
	if !ok {
		t.misses.Add(1)
		return dst, false
	}
	t.hits.Add(1)
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst, true
}

// Len returns how many token ids of (tokenizer, role, content) are
// cached, without copying them, and whether they are.
func (t *TokenCache) Len(tokenizer, role, content string) (int, bool) {
	ids, ok := t.c.Get(messageKey(tokenizer, role, content))
	if !ok {
		t.misses.Add(1)
		return 0, false
	}
	t.hits.Add(1)
	return len(ids), true
}

// Put offers the token ids of (tokenizer, role, content) to the cache, which
// keeps a copy if its admission policy lets it. tokens are llama.cpp token
// ids (32-bit).
func (t *TokenCache) Put(tokenizer, role, content string, tokens []int) {
	ids := make([]int32, len(tokens))
	for i, id := range tokens {
		ids[i] = int32(id)
	}
	t.c.Set(messageKey(tokenizer, role, content), ids, max(1, int64(len(ids))))
}

// Count returns the cached token count of (tokenizer, role, content): a
// message's share of a rendered prompt, as the window plans with it.
func (t *TokenCache) Count(tokenizer, role, content string) (int, bool) {
	v, ok := t.c.Get(messageKey(tokenizer+countKind, role, content))
	if !ok || len(v) != 1 {
		return 0, false
	}
	return int(v[0]), true
}

// PutCount offers a message's token count to the cache.
func (t *TokenCache) PutCount(tokenizer, role, content string, n int) {
	t.c.Set(messageKey(tokenizer+countKind, role, content), []int32{int32(n)}, 1)
}

// countKind sets count entries apart from token entries of the same text.
const countKind = "\x00count"

// Wait blocks until earlier Puts are applied (or dropped). Tests use it;
// servers need not.
func (t *TokenCache) Wait() { t.c.Wait() }

// Stats returns the hits and misses of Append so far.
func (t *TokenCache) Stats() (hits, misses uint64) { return t.hits.Load(), t.misses.Load() }

// Close stops the cache's goroutine and drops its contents.
func (t *TokenCache) Close() { t.c.Close() }

// messageKey is 128 bits of hash, as a 16-byte string: ristretto stores a
// key's 64-bit hash and checks a second 64-bit "conflict" hash on Get, and
// splitKey hands it the two halves. With a 64-bit key alone a collision would
// return another message's tokens into a prompt, changing an answer; at 128
// bits the chance is about n²/2^129.
func messageKey(tokenizer, role, content string) string {
	var k [16]byte
	binary.LittleEndian.PutUint64(k[:8], hashMessage(0, tokenizer, role, content))
	binary.LittleEndian.PutUint64(k[8:], hashMessage(0x9e3779b97f4a7c15, tokenizer, role, content))
	return string(k[:])
}

func hashMessage(seed uint64, tokenizer, role, content string) uint64 {
	d := xxhash.NewWithSeed(seed)
	var n [8]byte
	// Length prefixes keep the three fields from running into each other.
	for _, s := range [...]string{tokenizer, role, content} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		d.Write(n[:])
		d.WriteString(s)
	}
	return d.Sum64()
}

// splitKey undoes messageKey's encoding.
func splitKey(k string) (uint64, uint64) {
	le := func(s string) (v uint64) {
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(s[i])
		}
		return v
	}
	return le(k[:8]), le(k[8:16])
}
