package peers

import (
	"testing"

	"kvwin/engine"
	"kvwin/kvcache"
	"kvwin/router"
)

func peerPrompt(id uint64, blocks int) router.Prompt {
	keys := make([]kvcache.Key, blocks)
	for i := range keys {
		keys[i] = kvcache.Key(1000 + i)
	}
	return router.Prompt{Length: blocks * 16, Keys: keys, BlockTokens: 16, ID: id}
}

func peerCands(loads ...int) []router.Candidate {
	out := make([]router.Candidate, len(loads))
	for i, l := range loads {
		out[i] = router.Candidate{Name: string(rune('a' + i)), Load: l, Slots: 4, Cells: 4 * 4096}
	}
	return out
}

// llm-d: the pod its index says holds the prompt wins (prefix weight 3
// beats any queue or KV difference alone, 2 each); a pod holding a third
// of the prompt loses to an idle one once its queue is the longest.
func TestLLMDPrefersItsIndexedPodUntilTheQueueOutweighsAPartialMatch(t *testing.T) {
	l := newLLMD()
	first := l.Rank(peerCands(0, 0), peerPrompt(1, 30))[0].Name
	l.Ended(peerPrompt(1, 30))
	// Same prompt, the indexed pod now has a queue: the whole match still wins.
	c := peerCands(0, 0)
	for i := range c {
		if c[i].Name == first {
			c[i].Load = 10 // 6 waiting
		}
	}
	if got := l.Rank(c, peerPrompt(2, 30))[0].Name; got != first {
		t.Fatalf("whole prefix on %s with its queue the longest: picked %s", first, got)
	}
	l.Ended(peerPrompt(2, 30))
	// A prompt sharing only its first 10 of 30 blocks with what was sent:
	// prefix 3 × 1/3 = 1 against the idle pod's queue score 2.
	p := peerPrompt(3, 30)
	for i := 10; i < 30; i++ {
		p.Keys[i] = kvcache.Key(9000 + i)
	}
	if got := l.Rank(c, p)[0].Name; got == first {
		t.Fatalf("a third of the prompt on %s, its queue the longest: picked it over the idle pod", got)
	}
}

// SGLang: the worker whose tree matches more than half the prompt wins;
// with less, the smallest tree; past both imbalance thresholds (32
// requests and 1.0001×), the least loaded whatever the match.
func TestSGLangCacheAwareMatchThresholdAndImbalanceFallback(t *testing.T) {
	s := newSGLang()
	a := s.Rank(peerCands(0, 0, 0), peerPrompt(1, 20))[0].Name
	if got := s.Rank(peerCands(0, 0, 0), peerPrompt(2, 20))[0].Name; got != a {
		t.Fatalf("the prompt whole in %s's tree: picked %s", a, got)
	}
	// 5 of 20 blocks in a's tree: below cache_threshold 0.5, so the
	// smallest tree (an empty one) wins.
	p := peerPrompt(3, 20)
	for i := 5; i < 20; i++ {
		p.Keys[i] = kvcache.Key(7000 + i)
	}
	if got := s.Rank(peerCands(0, 0, 0), p)[0].Name; got == a {
		t.Fatalf("a quarter matched in %s's tree: picked it, want an empty tree", got)
	}
	c := peerCands(0, 0, 0)
	for i := range c {
		if c[i].Name == a {
			c[i].Load = 40
		} else {
			c[i].Load = 7
		}
	}
	c[2].Load = 5
	if c[2].Name == a {
		c[1].Load = 5
	}
	got := s.Rank(c, peerPrompt(4, 20))[0]
	if got.Name == a || got.Load != 5 {
		t.Fatalf("loads 40 (holding the prompt) / 7 / 5: picked %s with load %d, want the least loaded", got.Name, got.Load)
	}
	// Under the absolute threshold (40 − 9 = 31 ≤ 32) the match wins again.
	for i := range c {
		if c[i].Name != a {
			c[i].Load = 9
		}
	}
	if got := s.Rank(c, peerPrompt(5, 20))[0].Name; got != a {
		t.Fatalf("a gap of 31 requests: picked %s, want %s holding the prompt", got, a)
	}
}

// Dynamo: cost = prefill blocks not held + active decode blocks; a worker
// holding most of the prompt wins while idle, loses once its active
// blocks outweigh what it saves.
func TestDynamoWeighsOverlapAgainstDecodeLoad(t *testing.T) {
	d := newDynamo()
	c := peerCands(0, 0)
	c[0].Matched = 50 * 16 // 50 of 64 blocks
	p := peerPrompt(1, 64)
	if got := d.Rank(c, p)[0].Name; got != "a" {
		t.Fatalf("a holds 50 of 64 blocks, both idle: picked %s (costs 14+64 against 64+64)", got)
	}
	d.Ended(p)
	d.active.add(99, "a", 100*16, 0) // 100 active blocks on a
	if got := d.Rank(c, peerPrompt(2, 64))[0].Name; got != "b" {
		t.Fatalf("a holds 50 blocks but decodes 100: picked %s (costs 14+164 against 64+64)", got)
	}
	// Its prefill is counted until its first token.
	d.active.remove(99)
	d.Ended(peerPrompt(2, 64))
	w := d.Watch(peerPrompt(3, 64), nil)
	d.Rank(peerCands(0, 0), peerPrompt(3, 64)) // routed to one of them, 64 blocks to prefill
	before := d.active.load("a").prefill + d.active.load("b").prefill
	_ = w(eventFirst())
	after := d.active.load("a").prefill + d.active.load("b").prefill
	if before != 64*16 || after != 0 {
		t.Fatalf("prefill tokens pending: %d before the first token, %d after; want %d and 0", before, after, 64*16)
	}
}

func eventFirst() engine.Event { return engine.Event{First: true} }
