package router

import (
	"testing"
	"time"

	"kvwin/kvcache"
)

// Chains continued after gaps of 10–50 s, one turn in ten not continued:
// a chain idle 5 s is very likely continued, one idle ten minutes counts
// as abandoned; before the gaps are many and watched long enough, every
// chain counts whole.
func TestLivenessWeighsAChainByHowLongItHasBeenIdle(t *testing.T) {
	var l liveness
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	loc := func(i int) kvcache.Location { return kvcache.Location{Backend: "n", Slot: i} }
	key := kvcache.Key(1)
	conv := 0
	for i := range 400 {
		gap := time.Duration(10+i%41) * time.Second
		now = now.Add(gap)
		if i%10 == 0 { // a new conversation: continues nothing
			conv++
			l.observe(loc(conv%4), []kvcache.Key{kvcache.Key(1 << 40 * conv)}, []kvcache.Key{key + 1}, now)
			key++
			continue
		}
		l.observe(loc(conv%4), []kvcache.Key{key, key + 1}, []kvcache.Key{key + 1, key + 2}, now)
		key++
		if i == 40 {
			if w, known := l.weight(loc(conv%4), now.Add(time.Hour)); known || w != 1 {
				t.Fatalf("after %s of turns: weight %v known %v, want 1 until the gaps are watched long enough", now.Sub(t0), w, known)
			}
		}
	}
	fresh, known := l.weight(loc(conv%4), now.Add(5*time.Second))
	stale, _ := l.weight(loc(conv%4), now.Add(10*time.Minute))
	if !known || fresh < 0.8 || stale >= abandoned {
		t.Fatalf("idle 5 s: %.3f; idle 10 min: %.3f (known %v); want ≥ 0.8 and < %v", fresh, stale, known, abandoned)
	}
	if w, _ := l.weight(loc(99), now); w != 1 {
		t.Fatalf("a slot never used: weight %v", w)
	}
}

// The prefix scorer's tie tolerance is of the time to first token: a
// candidate within it that destroys another conversation's chain is no
// tie with one that destroys nothing.
func TestPrefixTieDoesNotHideWhatAPlacementDestroys(t *testing.T) {
	cfg, _ := Config{}.withDefaults()
	sc := prefixScorer{cfg: cfg}
	cands := []candidate{
		{index: 0, name: "free", predicted: 1000 * time.Millisecond, slack: 20 * time.Millisecond, plan: 2, planned: true, held: -1},
		{index: 1, name: "sibling", predicted: 1050 * time.Millisecond, extra: 950 * time.Millisecond, slack: 20 * time.Millisecond, plan: 0, planned: true, held: -1},
	}
	for root := range uint64(64) {
		if got := sc.rank(cands, prompt{root: root, length: 1100})[0].name; got != "free" {
			t.Fatalf("root %d: ranked %s first", root, got)
		}
	}
}
