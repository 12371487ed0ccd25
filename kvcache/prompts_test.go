package kvcache

import "testing"

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
