package fleet

import (
	"context"
	"slices"
	"testing"
	"time"
)

// seq is n tokens counting up from first.
func seq(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// The cache's rules, as llama-server's server_prompt_cache: a prompt an
// entry holds whole is not saved again, entries a new prompt holds whole
// are dropped, the oldest go to make room, and one larger than the cache
// is not saved; a load takes the entry keeping a larger share both of
// itself and of the request than the slot's own, never one keeping under
// a quarter of itself, and never into an empty slot.
func TestPromptCacheRules(t *testing.T) {
	c := newPromptCache(100*2, 2) // 100 tokens of 2 bytes
	a := seq(0, 40)
	if !c.save(a[:20]) || !c.save(seq(1000, 30)) || c.save(a[:10]) {
		t.Fatalf("saves: want a's prefix and another prompt kept, and a prompt an entry holds whole skipped; entries %d", len(c.entries))
	}
	if !c.save(a) || len(c.entries) != 2 || c.tokens != 70 {
		t.Fatalf("saving a: %d entries of %d tokens, want its prefix dropped (2 entries, 70 tokens)", len(c.entries), c.tokens)
	}
	if !c.save(seq(2000, 50)) || len(c.entries) != 2 || c.tokens != 90 || c.entries[0][0] != 0 {
		t.Fatalf("a third prompt: %d entries of %d tokens, want the oldest (1000…) evicted", len(c.entries), c.tokens)
	}
	if c.save(seq(3000, 101)) {
		t.Fatal("a prompt larger than the cache was saved")
	}

	slot := seq(5000, 30)                           // the slot holds another prompt
	req := append(slices.Clone(a), seq(9000, 5)...) // a's next turn
	if got := c.load(nil, req); got != nil {
		t.Errorf("an empty slot loaded %d tokens", len(got))
	}
	got := c.load(slot, req)
	if len(got) != len(a) || len(c.entries) != 1 || c.tokens != 50 {
		t.Fatalf("loaded %d tokens, %d entries of %d tokens left; want a (40) taken out of the cache", len(got), len(c.entries), c.tokens)
	}
	// A request sharing 10 tokens with a 50-token entry keeps a fifth of
	// it: under a quarter, so it is not loaded.
	if got := c.load(slot, append(seq(2000, 10), seq(7000, 5)...)); got != nil {
		t.Errorf("loaded an entry keeping a fifth of itself")
	}
	// One sharing 20 keeps 0.4 of it, more than the slot's nothing.
	if got := c.load(slot, append(seq(2000, 20), seq(7000, 5)...)); len(got) != 50 {
		t.Errorf("loaded %d tokens, want the 50-token entry keeping 0.4 of itself", len(got))
	}
}

// A conversation displaced from a llama-server's only slot comes back
// from its prompt cache: with --cache-ram its third turn computes only
// what is new; without, all of it.
func TestPromptCacheRestoresADisplacedConversation(t *testing.T) {
	mk := func(start time.Duration, first int, turns int) *conversation {
		c := &conversation{stream: seq(first, 200), start: start}
		for i := range turns {
			c.promptEnd = append(c.promptEnd, 100+40*i)
			c.answerEnd = append(c.answerEnd, 100+40*i+20)
			c.think = append(c.think, 30*time.Second)
		}
		return c
	}
	// a's turns at 0, ~30 s and ~60 s; b's one turn at 15 s takes the slot.
	for _, cacheRAM := range []int64{0, 1 << 30} {
		convs := []*conversation{mk(0, 1, 3), mk(15*time.Second, 100_000, 1)}
		cfg := Config{Nodes: 1, Slots: 1, Context: 4096, Kind: KindLlamaServer, CacheRAM: cacheRAM, Policy: "round-robin", Model: DefaultNodeModel()}
		out, err := run(context.Background(), cfg, convs)
		if err != nil {
			t.Fatal(err)
		}
		computed := map[[2]int]int{}
		for _, r := range out.turns {
			if r.err != nil {
				t.Fatal(r.err)
			}
			computed[[2]int{r.ci, r.index}] = r.computed
		}
		// a's second turn: 140 tokens of prompt, 119 held (its first
		// prompt and answer but the last token) unless b's turn took them.
		want := 140
		if cacheRAM > 0 {
			want = 140 - 119
		}
		if got := computed[[2]int{0, 1}]; got != want {
			t.Errorf("cache-ram %d: a's second turn computed %d tokens, want %d", cacheRAM, got, want)
		}
		if got := computed[[2]int{0, 2}]; got != 180-159 {
			t.Errorf("cache-ram %d: a's third turn computed %d tokens, want %d (its slot kept)", cacheRAM, got, 180-159)
		}
	}
}

// A prompt cache is llama-server's: asked of kvwin nodes, or of a
// negative size, the sweep refuses before it runs.
func TestPromptCacheIsLlamaServers(t *testing.T) {
	for _, o := range []Options{smallOptions(KindKvwin, "prefix"), smallOptions(KindLlamaServer, "prefix")} {
		o.CacheRAM = 1 << 30
		if o.Kind == KindLlamaServer {
			o.CacheRAM = -1
		}
		if _, err := Bench(context.Background(), o); err == nil {
			t.Errorf("%s nodes, cache of %d bytes: no error", o.Kind, o.CacheRAM)
		}
	}
}

// The excess breakdown tells a return whose KV its llama-server's prompt
// cache held from one whose KV was lost: at load 0.2 with --cache-ram the
// former were a quarter of the prefix router's excess, hidden in "lost".
func TestHoldsSaysThePromptCache(t *testing.T) {
	n := &node{slots: make([]slotState, 1), cache: newPromptCache(100*2, 2)}
	conv := seq(0, 40)
	if got := n.holds(0, conv[:30]); got != "lost" {
		t.Errorf("nothing holds it: %q, want lost", got)
	}
	n.cache.save(conv[:30])
	if got := n.holds(0, conv[:30]); got != "prompt cache" {
		t.Errorf("the prompt cache holds it whole: %q, want prompt cache", got)
	}
	if got := n.holds(0, conv); got != "lost" {
		t.Errorf("the prompt cache holds only its start: %q, want lost", got)
	}
	n.slots[0].kv = conv
	if got := n.holds(0, conv[:30]); got != "slot" {
		t.Errorf("a slot holds it too: %q, want slot", got)
	}
}
