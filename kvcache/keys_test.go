package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var testNS = Namespace{Model: "tiny.gguf", Template: "chatml", Adapter: "", ShiftEpoch: 0}

func mustKeyer(t testing.TB, ns Namespace, cfg KeyerConfig) *Keyer {
	t.Helper()
	k, err := NewKeyer(ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tokens returns n deterministic pseudo-random token ids.
func tokens(seed uint64, n int) []int {
	rng := rand.New(rand.NewPCG(seed, seed^0xabcdef))
	ts := make([]int, n)
	for i := range ts {
		ts[i] = rng.IntN(32000)
	}
	return ts
}

// diverge returns a copy of base that differs from position at on.
func diverge(base []int, at int) []int {
	out := append([]int(nil), base...)
	for i := at; i < len(out); i++ {
		out[i] = 32000 + i // outside tokens' range, so it always differs
	}
	return out
}

func sharedKeys(a, b []Key) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

func TestKeysSharedPrefix(t *testing.T) {
	base := tokens(1, 200)
	for _, tc := range []struct {
		name      string
		block     int
		divergeAt int
		want      int // keys shared
	}{
		{"differ in first token", 16, 0, 0},
		{"differ inside first block", 16, 15, 0},
		{"differ at a block boundary", 16, 16, 1},
		{"differ just past a boundary", 16, 17, 1},
		{"three full blocks shared", 16, 48, 3},
		{"identical prompts", 16, 200, 12},
		{"block of 1", 1, 37, 37},
		{"block of 64", 64, 130, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: tc.block})
			a := k.Tokens(base)
			b := k.Tokens(diverge(base, tc.divergeAt))
			if got := sharedKeys(a.Keys, b.Keys); got != tc.want {
				t.Fatalf("shared keys = %d, want %d", got, tc.want)
			}
			// Chaining: once keys differ they never meet again.
			for i := tc.want; i < len(a.Keys); i++ {
				if a.Keys[i] == b.Keys[i] {
					t.Fatalf("key %d equal after divergence at block %d", i, tc.want)
				}
			}
		})
	}
}

func TestKeysNameTheirPrefix(t *testing.T) {
	// Blocks 1.. are identical but block 0 differs: no key may be shared,
	// since a key stands for its whole prefix.
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	a := tokens(5, 96)
	b := append(tokens(6, 16), a[16:]...)
	ka, kb := k.Tokens(a), k.Tokens(b)
	for i := range ka.Keys {
		if ka.Keys[i] == kb.Keys[i] {
			t.Fatalf("block %d has the same key after different prefixes", i)
		}
	}
}

func TestKeysNamespaceSeparates(t *testing.T) {
	ts := tokens(2, 64)
	base := mustKeyer(t, testNS, KeyerConfig{}).Tokens(ts)
	for _, tc := range []struct {
		name string
		ns   Namespace
	}{
		{"model", Namespace{Model: "other.gguf", Template: "chatml"}},
		{"template", Namespace{Model: "tiny.gguf", Template: "llama3"}},
		{"adapter", Namespace{Model: "tiny.gguf", Template: "chatml", Adapter: "lora-a"}},
		{"shift epoch", Namespace{Model: "tiny.gguf", Template: "chatml", ShiftEpoch: 1}},
		{"fields run together", Namespace{Model: "tiny.ggufc", Template: "hatml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := mustKeyer(t, tc.ns, KeyerConfig{}).Tokens(ts)
			for i, key := range other.Keys {
				for j, b := range base.Keys {
					if key == b {
						t.Fatalf("key %d of %s equals base key %d", i, tc.name, j)
					}
				}
			}
		})
	}
}

func TestKeysFullBlocksOnly(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	for _, tc := range []struct {
		n, wantKeys int
	}{{0, 0}, {1, 0}, {15, 0}, {16, 1}, {31, 1}, {32, 2}, {8192, 512}, {8200, 512}} {
		t.Run(fmt.Sprintf("%d tokens", tc.n), func(t *testing.T) {
			ts := tokens(3, tc.n)
			c := k.Tokens(ts)
			if len(c.Keys) != tc.wantKeys || c.Length != tc.n || c.BlockSize != 16 || c.Approximate {
				t.Fatalf("%d tokens: %d keys, length %d, block %d, approx %v; want %d keys",
					tc.n, len(c.Keys), c.Length, c.BlockSize, c.Approximate, tc.wantKeys)
			}
			// The tail has no key: changing it changes no key.
			if tc.n%16 != 0 {
				changed := k.Tokens(diverge(ts, tc.n-1))
				if sharedKeys(c.Keys, changed.Keys) != len(c.Keys) {
					t.Fatal("changing the partial tail changed a key")
				}
			}
		})
	}
}

func TestKeysApproximate(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockBytes: 64})
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 10) // 450 bytes
	c := k.Text(text)
	if !c.Approximate || c.BlockSize != 64 || len(c.Keys) != 7 || c.Length != len(text) {
		t.Fatalf("text chain %+v", c)
	}
	edited := k.Text(text[:130] + "X" + text[131:])
	if got := sharedKeys(c.Keys, edited.Keys); got != 2 {
		t.Fatalf("edit at byte 130 shares %d blocks, want 2", got)
	}
	// Exact and approximate keys never meet, even over the same bytes.
	bytesAsTokens := make([]int, len(text))
	for i := range text {
		bytesAsTokens[i] = int(text[i])
	}
	exact := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 64}).Tokens(bytesAsTokens)
	if sharedKeys(c.Keys, exact.Keys) != 0 {
		t.Fatal("approximate and exact chains share a key")
	}
}

func TestKeyerConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  KeyerConfig
		ok   bool
	}{
		{"defaults", KeyerConfig{}, true},
		{"negative tokens", KeyerConfig{BlockTokens: -1}, false},
		{"huge tokens", KeyerConfig{BlockTokens: maxBlock + 1}, false},
		{"negative bytes", KeyerConfig{BlockBytes: -4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyer(testNS, tc.cfg)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if tc.ok && (k.BlockTokens() != DefaultBlockTokens || k.BlockBytes() != DefaultBlockBytes) {
				t.Fatalf("defaults %d, %d", k.BlockTokens(), k.BlockBytes())
			}
		})
	}
}

func TestChainPrefix(t *testing.T) {
	c := mustKeyer(t, testNS, KeyerConfig{}).Tokens(tokens(4, 100)) // 6 keys
	for _, tc := range []struct{ n, want int }{{-1, 0}, {0, 0}, {3, 3}, {6, 6}, {9, 6}} {
		p := c.Prefix(tc.n)
		if len(p.Keys) != tc.want || p.Length != tc.want*16 || p.validate() != nil {
			t.Fatalf("Prefix(%d) = %d keys, length %d", tc.n, len(p.Keys), p.Length)
		}
	}
}

func TestKeyerTenantsShareNoKey(t *testing.T) {
	base, err := NewKeyer(Namespace{Model: "m"}, KeyerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int, 64)
	for i := range prompt {
		prompt[i] = i
	}
	a, b := base.ForTenant("a"), base.ForTenant("b")
	ka, kb, ka2 := a.Tokens(prompt), b.Tokens(prompt), base.ForTenant("a").Tokens(prompt)
	if len(ka.Keys) != 4 || !slices.Equal(ka.Keys, ka2.Keys) {
		t.Fatalf("tenant a keys not stable: %v vs %v", ka.Keys, ka2.Keys)
	}
	for i := range ka.Keys {
		if ka.Keys[i] == kb.Keys[i] {
			t.Fatalf("tenants a and b share block %d's key", i)
		}
	}
	if ta, tb := a.Text(string(rune('x'))+string(make([]byte, 127))), b.Text(string(rune('x'))+string(make([]byte, 127))); ta.Keys[0] == tb.Keys[0] {
		t.Fatal("tenants share approximate keys")
	}
	if a.Namespace().Tenant != "a" || base.Namespace().Tenant != "" || a.ForTenant("a") != a {
		t.Fatalf("namespaces: %+v %+v", a.Namespace(), base.Namespace())
	}
}

// A chain continued from known keys is the chain keyed from nothing, for
// every known length, a partial tail block and known keys past the full
// blocks (which are not used).
func TestTokensAfterKnownKeysIsTokens(t *testing.T) {
	k, err := NewKeyer(Namespace{Model: "m"}, KeyerConfig{BlockTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	k = k.ForTenant("t")
	for n := 0; n <= 23; n++ {
		tokens := make([]int, n)
		for i := range tokens {
			tokens[i] = i*7919 + 3
		}
		want := k.Tokens(tokens)
		longer := k.Tokens(append(tokens, 1, 2, 3, 4, 5, 6, 7, 8))
		for known := 0; known <= len(longer.Keys); known++ {
			got := k.TokensAfter(longer.Keys[:known], tokens)
			if !slices.Equal(got.Keys, want.Keys) || got.Length != want.Length || got.BlockSize != want.BlockSize {
				t.Fatalf("%d tokens, %d known: %v, want %v", n, known, got, want)
			}
		}
	}
}
