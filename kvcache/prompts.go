package kvcache

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/ristretto/v2"
)

// The prompt cache's invariants:
//   - An entry is found only under the 128-bit hash of (tenant, renderer,
//     the rendering's settings, every message of the prefix in order): one
//     tenant's rendering is never served to another, and a prefix is never
//     confused with a conversation that shares only its last messages.
//   - An entry holds what the renderer produced for exactly that prefix, so
//     a hit is the same tokens the renderer would compute again; renderers
//     whose prefix rendering may depend on later messages (Jinja templates)
//     store, and check on a hit, the signature of the text the tokens came
//     from (Prefix.Sig), and render again when it differs.
//   - Memory is bounded by bytes (ristretto's cost); a dropped or evicted
//     entry costs one whole rendering, never a wrong prompt.

// PromptCacheConfig sizes a PromptCache. Zero fields take the defaults.
type PromptCacheConfig struct {
	// MaxBytes bounds the entries' token ids (4 bytes each) and
	// bookkeeping; default 64 MiB: about two entries (this turn's prompt and
	// its history) of a hundred 64k-token conversations.
	MaxBytes int64 `json:"max_bytes"`
}

// Prefix is a rendered prefix of a conversation: its prompt tokens (the
// rendering of its messages, without the generation prompt; read with Len,
// AppendTo and Last, never modified), the renderer's signature of the text
// they came from, and where the rendering stood after it (Pieces: the
// renderer's own position, e.g. the pieces rendered).
//
// The tokens are a flat array, base, shared by the prefixes stored after
// this one, then a tail: a clipped prefix of an append-only log (see Put).
// A turn stores its prompt and its history (the next turn continues one or
// the other). Stored whole, a 7,000-token conversation kept a new copy a
// turn or two (28 KB each) until the cache filled, so the heap never
// settled: it grew into new pages cycle after cycle, and a turn that
// touched them paid for their faults (about 15 µs a page on a virtual
// machine; 20 to 27 pages, 0.2–0.4 ms, in a turn's render at 242 messages
// under bench overhead). Stored after the prefix it was rendered from, a
// turn keeps about what it added.
type Prefix struct {
	Sig    Signature
	Pieces int
	base   []int32
	tail   []int32
	log    *tokenLog // tail's log; nil when tail is empty
}

// tokenLog is an append-only list of tokens that the tails of prefixes
// are clipped prefixes of: a tail that ends the log is extended in place,
// so a conversation that goes on stores each turn's tokens once.
type tokenLog struct {
	mu  sync.Mutex
	ids []int32
}

// Len is the number of tokens.
func (x *Prefix) Len() int { return len(x.base) + len(x.tail) }

// AppendTo appends the tokens to dst.
func (x *Prefix) AppendTo(dst []int) []int {
	dst = slices.Grow(dst, x.Len())
	for _, id := range x.base {
		dst = append(dst, int(id))
	}
	for _, id := range x.tail {
		dst = append(dst, int(id))
	}
	return dst
}

// Last is the last token; -1 when there is none.
func (x *Prefix) Last() int {
	switch {
	case len(x.tail) > 0:
		return int(x.tail[len(x.tail)-1])
	case len(x.base) > 0:
		return int(x.base[len(x.base)-1])
	}
	return -1
}

// flatShare is the rule that bounds a tail: once the tokens after a base
// would pass this share of it, a prefix is stored flat, as a new base. A
// conversation's prefixes then copy it whole once per quarter it grows
// (each token about five times over its life, whatever its length), and a
// tail never holds more than a quarter of what its base holds.
const flatShare = 4

// PromptCache holds the rendered prefixes of recent conversations, so a
// turn renders and tokenizes only the messages added since the previous
// one. Safe for concurrent use; Close stops its goroutine. Writes are
// asynchronous and may be dropped.
type PromptCache struct {
	c            *ristretto.Cache[string, *Prefix]
	hits, misses atomic.Uint64
}

// NewPromptCache returns a PromptCache; the caller owns it and must Close it.
func NewPromptCache(cfg PromptCacheConfig) (*PromptCache, error) {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("kvcache: prompt cache %+v: %w", cfg, ErrInvalidConfig)
	}
	// An entry is a prefix of some thousands of tokens: one counter per
	// 4 KiB of budget is ten per expected entry and more.
	c, err := ristretto.NewCache(&ristretto.Config[string, *Prefix]{
		NumCounters: max(1000, cfg.MaxBytes/4096*10), MaxCost: cfg.MaxBytes, BufferItems: 64,
		IgnoreInternalCost: true, KeyToHash: splitKey,
	})
	if err != nil {
		return nil, fmt.Errorf("kvcache: prompt cache: %w", err)
	}
	return &PromptCache{c: c}, nil
}

// Longest returns the cached prefix of the most messages that usable
// accepts, and its number of messages: keys[k] names a conversation's first
// k messages (keys[0], the root, is never looked up). nil when none; the
// caller must not modify the prefix. A prefix found counts as a hit, none
// as a miss.
func (p *PromptCache) Longest(keys []ChainKey, usable func(*Prefix) bool) (*Prefix, int) {
	for k := len(keys) - 1; k >= 1; k-- {
		if v, ok := p.c.Get(keys[k].String()); ok && usable(v) {
			p.hits.Add(1)
			return v, k
		}
	}
	p.misses.Add(1)
	return nil, 0
}

// Counts returns a count for each of n messages whose chain is keys
// (keys[k] names the first k; nil, or a nil p, keeps nothing): the counts
// of the longest prefix of them p holds, then count(i) for each message
// after it. It keeps the counts of all n and of the first n-1 (the history
// the next turn sends again), unless a count was not exact (an estimate is
// counted again next time). reused reports that a prefix was found. A
// window counts a whole conversation every turn; this counts what is new.
func (p *PromptCache) Counts(keys []ChainKey, n int, count func(i int) (int, bool)) (out []int, reused bool) {
	out = make([]int, 0, n)
	var like *Prefix
	from := 0
	if p != nil && keys != nil {
		if like, from = p.Longest(keys, func(x *Prefix) bool { return x.Len() > 0 }); like != nil {
			out = like.AppendTo(out)
		}
	}
	exact := true
	for i := from; i < n; i++ {
		c, ok := count(i)
		out, exact = append(out, c), exact && ok
	}
	if p != nil && keys != nil && exact && from < n {
		all := p.Put(keys[n], out, Signature{}, 0, like)
		if n-1 > from {
			p.Put(keys[n-1], out[:n-1], Signature{}, 0, all)
		}
	}
	return out, like != nil
}

// Put stores tokens as the prefix under key and returns it. like, if not
// nil, is a prefix whose tokens and these agree as far as both go: the
// prefix they were rendered from (a longer list than like's), or one stored
// for a longer list (a shorter one). The new prefix shares like's base when
// its tokens after it stay within flatShare of it, and like's tail as far
// as it agrees: tokens that extend a tail ending its log are appended there,
// in place; others are copied. Passing a like that does not agree stores a
// wrong prompt: callers pass the prefix their tokens were built from.
//
// An entry's cost counts its base's array and its log's whole room,
// every entry that shares them counting them again: the bytes held never
// pass the budget, and a shared entry evicts no sooner than a copy would
// have.
func (p *PromptCache) Put(key ChainKey, tokens []int, sig Signature, pieces int, like *Prefix) *Prefix {
	x, room := share(like, tokens)
	x.Sig, x.Pieces = sig, pieces
	p.c.Set(key.String(), x, int64(4*(cap(x.base)+room)+64))
	return x
}

// share lays out tokens as a prefix after like (see Put), and returns it
// with the room of its tail's log.
func share(like *Prefix, tokens []int) (*Prefix, int) {
	switch {
	case like == nil || len(like.base) == 0 || (len(tokens)-len(like.base))*flatShare > len(like.base):
		return &Prefix{base: int32s(make([]int32, 0, len(tokens)), tokens)}, 0
	case len(tokens) <= len(like.base):
		return &Prefix{base: like.base[:len(tokens)]}, 0 // its cap holds like's base: the cost counts it
	}
	x := &Prefix{base: like.base}
	n := len(tokens) - len(x.base) // the tail's length
	switch {
	case n == 0:
		return x, 0
	case n <= len(like.tail):
		x.tail, x.log = like.tail[:n:n], like.log
		return x, x.log.room()
	case like.log != nil:
		lg := like.log
		lg.mu.Lock()
		defer lg.mu.Unlock()
		if len(lg.ids) == len(like.tail) { // like's tail ends the log: go on there
			lg.ids = int32s(lg.ids, tokens[len(x.base)+len(lg.ids):])
			x.tail, x.log = slices.Clip(lg.ids), lg
			return x, cap(lg.ids)
		}
	}
	x.log = &tokenLog{ids: int32s(make([]int32, 0, n+n/flatShare), tokens[len(x.base):])}
	x.tail = slices.Clip(x.log.ids)
	return x, cap(x.log.ids)
}

// room is the log's capacity, which a prefix that shares it may hold.
func (lg *tokenLog) room() int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return cap(lg.ids)
}

func int32s(dst []int32, ids []int) []int32 {
	for _, id := range ids {
		dst = append(dst, int32(id))
	}
	return dst
}

// Wait blocks until earlier Puts are applied (or dropped). Tests use it.
func (p *PromptCache) Wait() { p.c.Wait() }

// Stats returns the hits and misses of Longest so far.
func (p *PromptCache) Stats() (hits, misses uint64) { return p.hits.Load(), p.misses.Load() }

// Close stops the cache's goroutine and drops its contents.
func (p *PromptCache) Close() { p.c.Close() }

// ChainKey is a 128-bit hash chain over a conversation's messages: Root
// names the tenant, the renderer and its settings; Next adds one message.
// It is a value; the zero ChainKey is not a root.
type ChainKey [2]uint64

// Root is the chain's start for a tenant under a renderer (its identity)
// and the rendering's settings (anything besides the messages that changes
// the tokens: tools, padding).
func Root(tenant, renderer string, settings ...string) ChainKey {
	fields := append([]string{tenant, renderer}, settings...)
	return ChainKey{}.next(fields...)
}

// Next is the chain extended by one message.
func (k ChainKey) Next(role, content string) ChainKey { return k.next(role, content) }

func (k ChainKey) next(fields ...string) ChainKey { return k.extend(0, false, fields...) }

// extend hashes k and fields, each length-prefixed, under two seeds;
// kind, if hasKind, is a one-byte field before them. The bytes are laid
// out once and each digest takes them in one write: a rendering extends a
// signature by every piece of the conversation each turn, and a dozen
// small writes a piece were most of its cost.
func (k ChainKey) extend(kind byte, hasKind bool, fields ...string) ChainKey {
	var stack [256]byte
	b := binary.LittleEndian.AppendUint64(stack[:0], k[0])
	b = binary.LittleEndian.AppendUint64(b, k[1])
	// Length prefixes keep the fields from running into each other.
	if hasKind {
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, kind)
	}
	for _, s := range fields {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	var out ChainKey
	var d xxhash.Digest
	for i, seed := range [2]uint64{0x6b76_7769_6e70_7231, 0x9e37_79b9_7f4a_7c15} {
		d.ResetWithSeed(seed)
		d.Write(b)
		out[i] = d.Sum64()
	}
	return out
}

// String is the key's 16 bytes, as the cache keys by.
func (k ChainKey) String() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], k[0])
	binary.LittleEndian.PutUint64(b[8:], k[1])
	return string(b[:])
}

// Signature is a running 128-bit hash of the text a rendering's tokens came
// from, piece by piece; Add returns the signature extended by one piece.
type Signature [2]uint64

// Add extends s by one piece of kind (the renderer's: structure or text).
func (s Signature) Add(kind byte, text string) Signature {
	return Signature(ChainKey(s).extend(kind, true, text))
}
