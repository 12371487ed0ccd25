package peers

import (
	"testing"

	"kvwin/engine"
	"kvwin/kvcache"
	"kvwin/router"
)

// llm-d's sticky until saturated: a prompt goes where its index holds 80%
// of it while that pod's in-flight tokens are within τ (throughput × 18 s)
// of the least loaded other pod's; past τ stickiness breaks and the least
// token load wins; a prompt held nowhere goes to the least token load,
// counting its own uncached tokens; a pod's in-flight tokens are released
// at the turn's first token.
func TestLLMDStickyHoldsUntilSaturated(t *testing.T) {
	s := newLLMDSticky()
	cands := func() []router.Candidate {
		c := peerCands(0, 0, 0)
		for i := range c {
			c[i].PeakPrefill = 1000 // τ = 18,000 tokens
		}
		return c
	}
	home := s.Rank(cands(), peerPrompt(1, 40))[0].Name
	stream := s.Watch(peerPrompt(1, 40), nil)
	if err := stream(engine.Event{First: true}); err != nil {
		t.Fatal(err)
	}
	s.Ended(peerPrompt(1, 40))
	if got := s.active.load(home).prefill; got != 0 {
		t.Fatalf("after the first token %s has %d tokens in flight", home, got)
	}
	// The same prompt, its pod busy with other prefills.
	for _, c := range []struct {
		name     string
		inflight int
		sticks   bool
	}{
		{"within τ", 17_000, true},
		{"past τ", 19_000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.active.add(100, home, 0, c.inflight)
			defer s.active.remove(100)
			p := peerPrompt(2, 40)
			got := s.Rank(cands(), p)[0].Name
			s.Ended(p)
			if (got == home) != c.sticks {
				t.Errorf("%d tokens in flight on %s: routed to %s", c.inflight, home, got)
			}
		})
	}
	// A prompt sharing 75% of the indexed one's blocks is not sticky: the
	// pod with least token load, its own uncached tokens counted, wins.
	s = newLLMDSticky()
	home = s.Rank(cands(), peerPrompt(1, 40))[0].Name
	s.Ended(peerPrompt(1, 40))
	for i, c := range []struct {
		inflight int
		home     bool
	}{{200, true}, {600, false}} { // against the 640 tokens the others lack
		p := peerPrompt(uint64(3+i), 40)
		for b := 30; b < 40; b++ {
			p.Keys[b] = kvcache.Key(7000 + 100*i + b) // a tail of its own
		}
		s.active.add(101, home, 0, c.inflight)
		got := s.Rank(cands(), p)[0].Name
		s.Ended(p)
		s.active.remove(101)
		if (got == home) != c.home {
			t.Errorf("not sticky, %d in flight + 160 uncached on %s against 640 elsewhere: routed to %s", c.inflight, home, got)
		}
	}
}
