package router

import (
	"testing"
	"time"

	"kvwin/kvcache"
)

// Conversations of ten turns, continued after gaps of 10–50 s: a chain of
// five turns idle 5 s is very likely continued, one idle ten minutes
// counts as abandoned; a chain of ten turns, which no conversation has
// ever continued, is likely ended even when idle 5 s; before the gaps are
// many and watched long enough, every chain counts whole.
func TestLivenessWeighsAChainByHowLongItHasBeenIdle(t *testing.T) {
	var l liveness
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	loc := func(i int) kvcache.Location { return kvcache.Location{Backend: "n", Slot: i} }
	key := kvcache.Key(1)
	conv := 0
	observe := func(i int) {
		gap := time.Duration(10+i%41) * time.Second
		now = now.Add(gap)
		if i%10 == 0 { // a new conversation: continues nothing
			conv++
			key += 1000 // its own keys
			l.observe(loc(conv%4), []kvcache.Key{kvcache.Key(1 << 40 * conv)}, []kvcache.Key{key + 1}, 0, 0, 0, now)
			key++
			return
		}
		l.observe(loc(conv%4), []kvcache.Key{key, key + 1}, []kvcache.Key{key + 1, key + 2}, 0, 0, 0, now)
		key++
		if i == 40 {
			if w, known := l.weight(loc(conv%4), now.Add(time.Hour)); known || w != whole {
				t.Fatalf("after %s of turns: weight %v known %v, want 1 until the gaps are watched long enough", now.Sub(t0), w, known)
			}
		}
	}
	for i := range 395 { // the last conversation has had five turns
		observe(i)
	}
	w, known := l.weight(loc(conv%4), now.Add(5*time.Second))
	fresh := w.byDepth
	w, _ = l.weight(loc(conv%4), now.Add(10*time.Minute))
	stale := w.byDepth
	if !known || fresh < 0.8 || stale >= abandoned {
		t.Fatalf("idle 5 s: %.3f; idle 10 min: %.3f (known %v); want ≥ 0.8 and < %v", fresh, stale, known, abandoned)
	}
	for i := 395; i < 400; i++ { // and now ten
		observe(i)
	}
	if w, _ := l.weight(loc(conv%4), now.Add(5*time.Second)); w.byDepth > 0.2 || w.byIdle < 0.8 {
		t.Fatalf("a chain of ten turns idle 5 s: %.3f by depth, %.3f by idle time; want ≤ 0.2 (no chain that long was ever continued) and ≥ 0.8", w.byDepth, w.byIdle)
	}
	if w, _ := l.weight(loc(99), now); w != whole {
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
		{index: 0, name: "free", predicted: 1000 * time.Millisecond, slack: 20 * time.Millisecond, plan: 2, hasPlan: true, holdingSlot: -1},
		{index: 1, name: "sibling", predicted: 1050 * time.Millisecond, extra: 950 * time.Millisecond, slack: 20 * time.Millisecond, plan: 0, hasPlan: true, holdingSlot: -1},
	}
	for root := range uint64(64) {
		if got := sc.rank(cands, prompt{root: root, length: 1100})[0].name; got != "free" {
			t.Fatalf("root %d: ranked %s first", root, got)
		}
	}
}

// The gaps a weight reads are re-sorted as they grow: the first sort, of
// one gap, once stood for the next 63, and that gap alone was the median.
func TestLivenessSortsItsGapsAgainAsTheyGrow(t *testing.T) {
	var l liveness
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loc := kvcache.Location{Backend: "n", Slot: 0}
	l.observe(loc, []kvcache.Key{1}, []kvcache.Key{1, 2}, 0, 0, 0, now)
	for i := range 40 {
		gap := 100 * time.Second
		if i == 0 {
			gap = time.Second
		}
		now = now.Add(gap)
		l.observe(loc, []kvcache.Key{kvcache.Key(i + 1), kvcache.Key(i + 2)}, []kvcache.Key{kvcache.Key(i + 2), kvcache.Key(i + 3)}, 0, 0, 0, now)
		l.mu.Lock()
		sorted := l.sortedGaps() // as a weight asks, after every turn
		l.mu.Unlock()
		if median := sorted[len(sorted)/2]; i > 2 && median != 100*time.Second {
			t.Fatalf("after %d gaps (one of 1 s, the rest 100 s): median %v of %d sorted", i+1, median, len(sorted))
		}
	}
}

// Chains never continued (single-turn requests only) leave no gap to age
// their tips by: what liveness keeps of them stays bounded all the same.
func TestLivenessKeepsBoundedStateWithoutContinuations(t *testing.T) {
	var l liveness
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loc := kvcache.Location{Backend: "n", Slot: 0}
	for i := range maxTips + 1000 {
		now = now.Add(time.Second)
		k := kvcache.Key(2*i + 1)
		l.observe(loc, []kvcache.Key{k}, []kvcache.Key{k + 1}, 0, 0, 0, now)
	}
	if len(l.tips) > maxTips || len(l.order) > maxTips || len(l.aging) > maxTips {
		t.Fatalf("tips %d, order %d, aging %d; want each at most %d", len(l.tips), len(l.order), len(l.aging), maxTips)
	}
}
