package kvcache

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Key names a full block and, through its parent, every block before it.
type Key uint64

// Default block sizes. 16 tokens is vLLM's and llm-d's block; 64 bytes is the
// Gateway API Inference Extension's approximate block.
const (
	DefaultBlockTokens = 16
	DefaultBlockBytes  = 64
)

// Namespace is what makes the same tokens mean different KV: another model,
// chat template or adapter computes other values, and a shifted sequence's KV
// differs from a freshly computed one (docs/architecture.md, "The window"),
// so each shift epoch starts keys of its own.
//
// Tenant is not about the KV's values but about who may reuse it: each
// tenant's keys are salted by its name, so one tenant's lookups never find
// another tenant's blocks, and a cached-token count says nothing about what
// other tenants sent (docs/architecture.md, "Conversations and tenants").
type Namespace struct {
	Model      string `json:"model"`
	Template   string `json:"template"`
	Adapter    string `json:"adapter"`
	ShiftEpoch uint64 `json:"shift_epoch"`
	Tenant     string `json:"tenant"`
}

// KeyerConfig sets the block sizes of a Keyer. Zero fields take the defaults.
type KeyerConfig struct {
	BlockTokens int `json:"block_tokens"` // tokens per block; default 16
	BlockBytes  int `json:"block_bytes"`  // bytes of text per approximate block; default 64
}

// maxBlock bounds block sizes so a block's hash input fits one small buffer;
// nobody keys KV in blocks of more than a few hundred tokens.
const maxBlock = 4096

// Keyer turns prompts of one Namespace into key chains. It holds no mutable
// state and is safe for concurrent use.
type Keyer struct {
	ns                      Namespace
	blockTokens, blockBytes int
	exactRoot, approxRoot   Key
}

// NewKeyer returns a Keyer for ns. It fails on block sizes outside 1..4096.
func NewKeyer(ns Namespace, cfg KeyerConfig) (*Keyer, error) {
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = DefaultBlockTokens
	}
	if cfg.BlockBytes == 0 {
		cfg.BlockBytes = DefaultBlockBytes
	}
	if cfg.BlockTokens < 1 || cfg.BlockTokens > maxBlock {
		return nil, fmt.Errorf("kvcache: block_tokens %d: %w", cfg.BlockTokens, ErrInvalidConfig)
	}
	if cfg.BlockBytes < 1 || cfg.BlockBytes > maxBlock {
		return nil, fmt.Errorf("kvcache: block_bytes %d: %w", cfg.BlockBytes, ErrInvalidConfig)
	}
	return &Keyer{
		ns:          ns,
		blockTokens: cfg.BlockTokens,
		blockBytes:  cfg.BlockBytes,
		exactRoot:   root(ns, false, cfg.BlockTokens),
		approxRoot:  root(ns, true, cfg.BlockBytes),
	}, nil
}

// root hashes everything that makes keys incomparable. Strings are
// length-prefixed so ("ab", "c") and ("a", "bc") differ; mode and block size
// are included so a 16-token block never matches a 32-token one or a block
// of text.
func root(ns Namespace, approximate bool, block int) Key {
	d := xxhash.New()
	var n [8]byte
	write := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		d.Write(n[:])
		d.WriteString(s)
	}
	write("kvwin/kvcache/v1")
	if approximate {
		write("bytes")
	} else {
		write("tokens")
	}
	binary.LittleEndian.PutUint64(n[:], uint64(block))
	d.Write(n[:])
	write(ns.Model)
	write(ns.Template)
	write(ns.Adapter)
	binary.LittleEndian.PutUint64(n[:], ns.ShiftEpoch)
	d.Write(n[:])
	if ns.Tenant != "" {
		// Only when set, so keys without a tenant stay those of kvwin/kvcache/v1.
		write("tenant")
		write(ns.Tenant)
	}
	return Key(d.Sum64())
}

// NewTextKeyer returns the Keyer of approximate keys (Text) for model: the
// one scheme that a gateway's registry and a backend's own reuse estimate
// (engine/ollama) share, so that both give the same conversation the same
// keys. Salt it with ForTenant, as every other chain is.
func NewTextKeyer(model string) (*Keyer, error) {
	return NewKeyer(Namespace{Model: model}, KeyerConfig{})
}

// ForTenant returns a Keyer of the same namespace and block sizes whose keys
// are salted by tenant: its chains share no key with another tenant's. It
// is cheap (two short hashes) and does not modify k.
func (k *Keyer) ForTenant(tenant string) *Keyer {
	if tenant == k.ns.Tenant {
		return k
	}
	ns := k.ns
	ns.Tenant = tenant
	return &Keyer{
		ns: ns, blockTokens: k.blockTokens, blockBytes: k.blockBytes,
		exactRoot: root(ns, false, k.blockTokens), approxRoot: root(ns, true, k.blockBytes),
	}
}

// Namespace returns the namespace k keys.
func (k *Keyer) Namespace() Namespace { return k.ns }

// BlockTokens returns the number of tokens in a block.
func (k *Keyer) BlockTokens() int { return k.blockTokens }

// BlockBytes returns the number of bytes of text in an approximate block.
func (k *Keyer) BlockBytes() int { return k.blockBytes }

// Tokens keys the full blocks of tokens. Token ids are hashed as 32-bit
// values, which is what llama.cpp's llama_token is.
func (k *Keyer) Tokens(tokens []int) Chain { return k.TokensAfter(nil, tokens) }

// TokensAfter is Tokens where known is already the chain of the first
// len(known) blocks of tokens under k (the caller vouches for it; at most
// the full blocks are used): only the blocks after them are hashed. A
// slot's chain after a turn is mostly the chain its prompt was keyed by as
// it arrived, so recording it costs the answer, not the conversation.
func (k *Keyer) TokensAfter(known []Key, tokens []int) Chain {
	b := k.blockTokens
	keys := make([]Key, len(tokens)/b)
	from := copy(keys, known)
	// One buffer for every block: parent key then the block's ids. Reusing it
	// keeps keying an 8k-token prompt to a single allocation besides keys.
	buf := make([]byte, 8+4*b)
	parent := k.exactRoot
	if from > 0 {
		parent = keys[from-1]
	}
	for i := from; i < len(keys); i++ {
		binary.LittleEndian.PutUint64(buf, uint64(parent))
		for j, t := range tokens[i*b : (i+1)*b] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(t))
		}
		parent = Key(xxhash.Sum64(buf))
		keys[i] = parent
	}
	return Chain{Keys: keys, Length: len(tokens), BlockSize: b}
}

// Text keys the full blocks of bytes of text, for backends that cannot
// tokenize for us. The chain is marked Approximate: its units are bytes, and a
// byte block does not line up with the backend's token blocks.
func (k *Keyer) Text(text string) Chain {
	b := k.blockBytes
	keys := make([]Key, len(text)/b)
	buf := make([]byte, 8+b)
	parent := k.approxRoot
	for i := range keys {
		binary.LittleEndian.PutUint64(buf, uint64(parent))
		copy(buf[8:], text[i*b:(i+1)*b])
		parent = Key(xxhash.Sum64(buf))
		keys[i] = parent
	}
	return Chain{Keys: keys, Length: len(text), BlockSize: b, Approximate: true}
}

// Chain is a prompt's key chain: one key per full block, in order.
type Chain struct {
	Keys []Key
	// Length is the prompt's length in units (tokens, or bytes when
	// Approximate), including a partial tail block that has no key. It is
	// what was sent, and bounds what a backend can claim to have reused.
	Length int
	// BlockSize is the number of units per block.
	BlockSize int
	// Approximate marks a chain over bytes of text instead of tokens.
	Approximate bool
}

// Units returns the number of units (tokens, or bytes when Approximate)
// covered by the first blocks blocks.
func (c Chain) Units(blocks int) int { return blocks * c.BlockSize }

// Prefix returns the chain of the first n blocks (n is clamped to
// 0..len(Keys)). It shares Keys with c.
func (c Chain) Prefix(n int) Chain {
	n = max(0, min(n, len(c.Keys)))
	c.Keys = c.Keys[:n:n]
	c.Length = n * c.BlockSize
	return c
}

// validate checks what the registry relies on: keys are exactly the full
// blocks of Length units.
func (c Chain) validate() error {
	if c.BlockSize < 1 {
		return fmt.Errorf("kvcache: chain block size %d: %w", c.BlockSize, ErrInvalidChain)
	}
	if c.Length < 0 || len(c.Keys) != c.Length/c.BlockSize {
		return fmt.Errorf("kvcache: chain of %d keys for %d units of %d: %w",
			len(c.Keys), c.Length, c.BlockSize, ErrInvalidChain)
	}
	return nil
}
