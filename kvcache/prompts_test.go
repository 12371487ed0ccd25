package kvcache

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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
	a := p.Put(keys[1], []int{1}, Signature{}.Add('t', "a"), 1, nil)
	p.Put(keys[2], []int{1, 2}, Signature{}, 2, a)
	p.Wait()
	got, k := p.Longest(keys, func(*Prefix) bool { return true })
	if k != 2 || got.Len() != 2 || got.Last() != 2 {
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

// A conversation stored turn by turn, each prompt after the prefix it was
// rendered from, keeps each turn's tokens about once: its prefixes share a
// base that is copied once per quarter it grows and a log the turns append
// to in place. A retry (a prompt rendered again from an earlier prefix)
// copies its tail and changes no one's tokens; every prefix reads back as
// it was stored.
func TestPromptCacheSharesWhatItExtends(t *testing.T) {
	p, err := NewPromptCache(PromptCacheConfig{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = rng.IntN(50000)
		}
		return out
	}
	type stored struct {
		x    *Prefix
		want []int
	}
	var all []stored
	check := func(from int) {
		t.Helper()
		for i, s := range all[from:] {
			if got := s.x.AppendTo(nil); !slices.Equal(got, s.want) {
				t.Fatalf("prefix %d of %d reads %d tokens other than the %d stored", i, len(all), len(got), len(s.want))
			}
		}
	}
	key := Root("t", "r")
	conv := tokens(7000)
	prev := p.Put(key, conv, Signature{}, 0, nil)
	all = append(all, stored{prev, slices.Clone(conv)})
	bases := map[*int32]bool{}
	logs := map[*tokenLog]bool{}
	for turn := range 600 {
		// A retry every fifth turn: the last prompt rendered again with
		// another ask, from the history before it.
		if turn%5 == 4 {
			hist := all[len(all)-2]
			retry := append(slices.Clone(hist.want), tokens(30)...)
			x := p.Put(key.Next("retry", ""), retry, Signature{}, 0, hist.x)
			all = append(all, stored{x, retry})
			check(len(all) - 4)
			continue
		}
		history := len(conv) + 40 // a reply
		conv = append(conv, tokens(70)...)
		key = key.Next("turn", "")
		x := p.Put(key, conv, Signature{}, 0, prev)
		h := p.Put(key.Next("history", ""), conv[:history], Signature{}, 0, x)
		all = append(all, stored{h, slices.Clone(conv[:history])}, stored{x, slices.Clone(conv)})
		if len(prev.tail) > 0 && &x.base[0] == &prev.base[0] && x.log != prev.log {
			t.Fatalf("turn %d: the tail was copied within its log", turn)
		}
		bases[&x.base[0]], logs[x.log] = true, true
		prev = x
	}
	check(0)
	// 7,000 → 49,000 tokens: a base per quarter grown is about nine; the
	// retries' copies are logs of their own.
	if len(bases) > 12 {
		t.Errorf("%d bases for a conversation grown sevenfold; want about nine", len(bases))
	}
	if len(logs) > 12 {
		t.Errorf("%d logs for the turns that went on; want one a base", len(logs))
	}
}

// Prefixes extended at once from one prefix: one goes on in place, the
// others copy, and each reads back as stored (under the race detector).
func TestPromptCacheConcurrentExtensions(t *testing.T) {
	p, err := NewPromptCache(PromptCacheConfig{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	base := make([]int, 4000)
	for i := range base {
		base[i] = i
	}
	root := p.Put(Root("t", "r"), base, Signature{}, 0, nil)
	first := p.Put(Root("t", "r").Next("a", ""), append(slices.Clone(base), 1, 2, 3), Signature{}, 0, root)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			like, want := first, append(slices.Clone(base), 1, 2, 3)
			for i := range 50 {
				want = append(want, g*1000+i)
				x := p.Put(Root("t", "r").Next("g", string(rune(g))), want, Signature{}, 0, like)
				// The history before its last token, as a turn stores it.
				h := p.Put(Root("t", "r").Next("h", string(rune(g))), want[:len(want)-1], Signature{}, 0, x)
				if got := x.AppendTo(nil); !slices.Equal(got, want) {
					t.Errorf("goroutine %d, turn %d: read %d tokens, not the %d stored", g, i, len(got), len(want))
					return
				}
				if got := h.AppendTo(nil); !slices.Equal(got, want[:len(want)-1]) {
					t.Errorf("goroutine %d, turn %d: the history reads %d tokens, not the %d stored", g, i, len(got), len(want)-1)
					return
				}
				like = x
			}
		})
	}
	// Meanwhile, prefixes within the first one (its history) share its log
	// as the goroutine that went on from it in place appends there.
	wg.Go(func() {
		for range 400 {
			h := p.Put(Root("t", "r").Next("within", ""), append(slices.Clone(base), 1, 2), Signature{}, 0, first)
			if got := h.AppendTo(nil); len(got) != len(base)+2 || got[len(got)-1] != 2 {
				t.Errorf("a prefix within the first reads %d tokens ending %d", len(got), got[len(got)-1])
				return
			}
		}
	})
	wg.Wait()
	if got := first.AppendTo(nil); !slices.Equal(got[len(base):], []int{1, 2, 3}) || len(got) != len(base)+3 {
		t.Errorf("the prefix they went on from now reads %v after its base", got[len(base):])
	}
}

// Counts counts only what follows the longest prefix counted before, keeps
// the list and the list less its last message, never keeps an estimate,
// and counts everything without a cache.
func TestPromptCacheCounts(t *testing.T) {
	p, err := NewPromptCache(PromptCacheConfig{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	keys := []ChainKey{Root("t", "counts")}
	for i := range 6 {
		keys = append(keys, keys[i].Next("user", fmt.Sprint(i)))
	}
	var asked []int
	exact := true
	count := func(i int) (int, bool) { asked = append(asked, i); return 10 + i, exact }
	step := func(name string, n int, wantAsked []int, wantReused bool) {
		t.Helper()
		asked = nil
		got, reused := p.Counts(keys[:n+1], n, count)
		p.Wait()
		for i, c := range got {
			if c != 10+i {
				t.Fatalf("%s: count %d = %d, want %d", name, i, c, 10+i)
			}
		}
		if len(got) != n || !slices.Equal(asked, wantAsked) || reused != wantReused {
			t.Fatalf("%s: %d counts, asked %v, reused %v; want %d, %v, %v", name, len(got), asked, reused, n, wantAsked, wantReused)
		}
	}
	step("first", 3, []int{0, 1, 2}, false)
	step("the same list", 3, nil, true)
	step("two more", 5, []int{3, 4}, true)
	step("the history the next turn resends", 4, nil, true)
	exact = false
	step("an estimate", 6, []int{5}, true)
	exact = true
	step("the estimate counted again", 6, []int{5}, true)
	step("then kept", 6, nil, true)
	asked = nil
	var none *PromptCache
	if got, reused := none.Counts(nil, 3, count); len(got) != 3 || reused || !slices.Equal(asked, []int{0, 1, 2}) {
		t.Fatalf("no cache: %v, %v, asked %v", got, reused, asked)
	}
}
