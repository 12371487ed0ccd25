package kvcache

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// A chain names its tenant, renderer, settings and every message in order:
// any difference is another key.
func TestChainKeysDiffer(t *testing.T) {
	base := Root("alice", "r", "0").Next("user", "hi")
	for name, k := range map[string]ChainKey{
		"tenant":   Root("bob", "r", "0").Next("user", "hi"),
		"renderer": Root("alice", "q", "0").Next("user", "hi"),
		"settings": Root("alice", "r", "1").Next("user", "hi"),
		"role":     Root("alice", "r", "0").Next("system", "hi"),
		"content":  Root("alice", "r", "0").Next("user", "hi!"),
		"split":    Root("alice", "r", "0").Next("userh", "i"),
		"longer":   base.Next("user", "hi"),
	} {
		if k == base {
			t.Errorf("%s: same key", name)
		}
	}
	if Root("alice", "r", "0").Next("user", "hi") != base {
		t.Error("the same chain gave another key")
	}
}

// Longest finds the longest stored prefix usable accepts, and counts a hit
// or a miss per lookup.
func TestPromptCacheLongest(t *testing.T) {
	p, err := NewPromptCache(PromptCacheConfig{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	keys := []ChainKey{Root("t", "r")}
	for _, c := range []string{"a", "b", "c"} {
		keys = append(keys, keys[len(keys)-1].Next("user", c))
	}
	p.Put(keys[1], []int{1}, Signature{}.Add('t', "a"), 1)
	p.Put(keys[2], []int{1, 2}, Signature{}, 2)
	p.Wait()
	got, k := p.Longest(keys, func(*Prefix) bool { return true })
	if k != 2 || len(got.Tokens) != 2 {
		t.Fatalf("longest: %d messages, %v; want 2", k, got)
	}
	got, k = p.Longest(keys, func(x *Prefix) bool { return x.Sig == Signature{}.Add('t', "a") })
	if k != 1 || got.Pieces != 1 {
		t.Fatalf("longest usable: %d messages, want 1", k)
	}
	if _, k = p.Longest(keys[:1], func(*Prefix) bool { return true }); k != 0 {
		t.Fatalf("the root alone found %d", k)
	}
	if h, m := p.Stats(); h != 2 || m != 1 {
		t.Errorf("stats %d hits %d misses, want 2 and 1", h, m)
	}
	if _, err := NewPromptCache(PromptCacheConfig{MaxBytes: -1}); err == nil {
		t.Error("a negative budget was accepted")
	}
}

// nextBefore is ChainKey.next as it was, with a digest allocated per
// seed: the keys and signatures must not change.
func nextBefore(k ChainKey, fields ...string) ChainKey {
	var out ChainKey
	var n [8]byte
	for i, seed := range [2]uint64{0x6b76_7769_6e70_7231, 0x9e37_79b9_7f4a_7c15} {
		d := xxhash.NewWithSeed(seed)
		binary.LittleEndian.PutUint64(n[:], k[0])
		d.Write(n[:])
		binary.LittleEndian.PutUint64(n[:], k[1])
		d.Write(n[:])
		for _, s := range fields {
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			d.Write(n[:])
			d.WriteString(s)
		}
		out[i] = d.Sum64()
	}
	return out
}

// Chain keys and signatures hash the same bytes as before the digest moved
// to the stack.
func TestChainKeysAndSignaturesAreUnchanged(t *testing.T) {
	k := Root("alice", "renderer", "true")
	if want := nextBefore(ChainKey{}, "alice", "renderer", "true"); k != want {
		t.Fatalf("root %x, before %x", k, want)
	}
	var sig Signature
	for i, text := range []string{"", "user", "héllo\x00", strings.Repeat("long text ", 300)} {
		if got, want := k.Next("user", text), nextBefore(k, "user", text); got != want {
			t.Fatalf("next %d: %x, before %x", i, got, want)
		}
		kind := byte('a' + i)
		if got, want := sig.Add(kind, text), Signature(nextBefore(ChainKey(sig), string([]byte{kind}), text)); got != want {
			t.Fatalf("signature %d: %x, before %x", i, got, want)
		}
		sig = sig.Add(kind, text)
	}
}

// A piece's signature, now and as it was (go test -bench Signature
// ./kvcache: the ratio of the two, taken side by side).
func BenchmarkSignatureAdd(b *testing.B) {
	text := strings.Repeat("a message of a conversation ", 4)
	b.Run("now", func(b *testing.B) {
		b.ReportAllocs()
		var s Signature
		for range b.N {
			s = s.Add('t', text)
		}
	})
	b.Run("before", func(b *testing.B) {
		b.ReportAllocs()
		var s Signature
		for range b.N {
			s = Signature(nextBefore(ChainKey(s), string([]byte{'t'}), text))
		}
	})
}
