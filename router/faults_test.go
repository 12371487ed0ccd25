package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// timeoutErr is what an adapter returns when a backend sent no first token
// in time.
var timeoutErr = fmt.Errorf("%w: no first token within 50ms", engine.ErrTimeout)

// TestTimeoutIsRetriedOnceOnAnotherBackend: under every policy, a turn whose
// backend times out comes back from another backend; the one that timed out
// is out until a probe generation succeeds; with no other backend, or a
// second timeout, the client gets engine.ErrTimeout.
func TestTimeoutIsRetriedOnceOnAnotherBackend(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			hung, good := newFake("hung"), newFake("good")
			hung.fail = timeoutErr
			// Long health interval: no check runs during the test.
			r := newRouter(t, Config{Policy: policy, HealthInterval: time.Hour}, hung, good)
			// At least 4 turns, and on until one was sent to the hung
			// backend: the random policy may pass it by (all of 4 turns
			// with chance 1/16; all of 64 with chance 2^-64).
			for i := 0; i < 4 || (hung.count() == 0 && i < 64); i++ {
				if res := generate(t, r, conv(i, 1)); res.Backend != "good" {
					t.Fatalf("turn %d served by %s", i, res.Backend)
				}
			}
			if hung.count() != 1 {
				t.Fatalf("the hung backend got %d turns; want the one that timed out and none after it", hung.count())
			}
			if st := r.Status()[0]; st.Healthy || !st.Suspect {
				t.Fatalf("hung backend after a timeout: %+v", st)
			}
		})
	}
	t.Run("no other backend: ErrTimeout", func(t *testing.T) {
		hung := newFake("hung")
		hung.fail = timeoutErr
		r := newRouter(t, Config{HealthInterval: time.Hour}, hung)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
		if !errors.Is(err, engine.ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		// Distrusted: the next turn is not sent to it at all.
		_, err = r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
		if !errors.Is(err, engine.ErrUnavailable) || hung.count() != 1 {
			t.Fatalf("second turn: err %v, the hung backend got %d turns", err, hung.count())
		}
	})
	t.Run("two timeouts: no third try", func(t *testing.T) {
		a, b, c := newFake("a"), newFake("b"), newFake("c")
		a.fail, b.fail = timeoutErr, timeoutErr
		r := newRouter(t, Config{Policy: PolicyRoundRobin, HealthInterval: time.Hour}, a, b, c)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
		if !errors.Is(err, engine.ErrTimeout) || c.count() != 0 {
			t.Fatalf("err %v, c served %d", err, c.count())
		}
	})
}

// probeFake answers /health always; its generations hang (time out) until
// it is fixed. It counts the probes (prompt "ping", one token) it gets.
type probeFake struct {
	*fake
	mu     sync.Mutex
	broken bool
	probes int
	probed chan struct{}
}

func (p *probeFake) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	p.mu.Lock()
	broken := p.broken
	if req.Prompt == "ping" && req.MaxTokens == 1 {
		p.probes++
		select {
		case p.probed <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	if broken {
		return engine.Result{}, timeoutErr
	}
	return p.fake.Generate(ctx, req, stream)
}

func (p *probeFake) set(broken bool) {
	p.mu.Lock()
	p.broken = broken
	p.mu.Unlock()
}

// A backend that timed out stays out while it answers /health, until a
// probe generation succeeds.
func TestTimedOutBackendNeedsAProbeGenerationToComeBack(t *testing.T) {
	p := &probeFake{fake: newFake("p"), broken: true, probed: make(chan struct{}, 64)}
	good := newFake("good")
	r, err := New(Config{Policy: PolicyRoundRobin, HealthInterval: 10 * time.Millisecond, HealthMaxBackoff: 20 * time.Millisecond},
		[]engine.Backend{p, good}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res := generate(t, r, conv(1, 1)); res.Backend != "good" {
		t.Fatalf("served by %s", res.Backend)
	}
	// Probes fail while it hangs; /health alone would have let it back.
	for range 3 {
		select {
		case <-p.probed:
		case <-time.After(3 * time.Minute):
			t.Fatal("no probe generation of the distrusted backend")
		}
		if r.Status()[0].Healthy {
			t.Fatal("healthy again while its generations time out")
		}
	}
	p.set(false)
	for !r.Status()[0].Healthy {
		select {
		case <-r.Changed():
		case <-time.After(3 * time.Minute):
			t.Fatal("not healthy after a probe could succeed")
		}
	}
	if st := r.Status()[0]; st.Suspect {
		t.Fatalf("still suspect: %+v", st)
	}
}

// shrinkFake refuses slots beyond its (changeable) slot count, as a node
// restarted with fewer slots does, and reports them once refreshed.
type shrinkFake struct {
	*fake
	mu        sync.Mutex
	actual    int // the slots the server has now
	reported  int // what Info says (as of the last Refresh)
	refreshes int
	refreshed chan struct{}
	asked     []int // the slot of every request, refused or not
}

func (s *shrinkFake) Info() engine.Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.fake.Info()
	i.Slots = s.reported
	return i
}

func (s *shrinkFake) Refresh(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reported = s.actual
	s.refreshes++
	select {
	case s.refreshed <- struct{}{}:
	default:
	}
	return nil
}

func (s *shrinkFake) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	s.mu.Lock()
	actual := s.actual
	s.asked = append(s.asked, req.Slot)
	s.mu.Unlock()
	if req.Slot >= actual {
		return engine.Result{}, engine.Invalid("slot %d does not exist (slots 0..%d)", req.Slot, actual-1)
	}
	s.fake.mu.Lock()
	s.fake.slots = actual
	s.fake.mu.Unlock()
	return s.fake.Generate(ctx, req, stream)
}

// A pin to a slot the backend no longer has is dropped and the turn run
// unpinned: the client never sees the router's mistake.
func TestRefusedPinIsDroppedAndTheTurnRetriedUnpinned(t *testing.T) {
	s := &shrinkFake{fake: newFake("n"), actual: 2, reported: 2, refreshed: make(chan struct{}, 8)}
	r, err := New(Config{HealthInterval: time.Hour}, []engine.Backend{s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The first health check (and its refresh) runs at the first tick; the
	// next one an hour later, so only the refused pin can re-read slots.
	select {
	case <-s.refreshed:
	case <-time.After(3 * time.Minute):
		t.Fatal("no first health check")
	}
	// Two conversations: the second lands in slot 1 (the least recently
	// used), and its continuation is pinned there.
	generate(t, r, conv(1, 1))
	res := generate(t, r, conv(2, 1))
	if res.Slot != 1 {
		t.Fatalf("second conversation in slot %d, want 1", res.Slot)
	}
	s.mu.Lock()
	s.actual = 1 // restarted with one slot
	s.mu.Unlock()
	res, err = r.Generate(context.Background(), engine.Request{Messages: conv(2, 2), Slot: -1}, nil)
	if err != nil {
		t.Fatalf("continuation after the restart: %v", err)
	}
	if fmt.Sprint(s.asked) != "[-1 -1 1 -1]" || res.Slot != 0 {
		t.Fatalf("want a refused pin to slot 1 then an unpinned retry; got requests for slots %v, served in %d", s.asked, res.Slot)
	}
	if st := r.Status()[0]; st.Slots != 1 || s.refreshes != 2 {
		t.Fatalf("slots not re-read: %+v after %d refreshes", st, s.refreshes)
	}
	if held := r.Registry().Held(kvcache.Location{Backend: "n", Slot: 1}); len(held) != 0 {
		t.Fatalf("the registry still holds %d blocks in the vanished slot", len(held))
	}
	// Later turns are not pinned to the vanished slot at all.
	if _, err := r.Generate(context.Background(), engine.Request{Messages: conv(2, 3), Slot: -1}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.asked[4:]; len(got) != 1 || got[0] >= 1 {
		t.Fatalf("later turn sent for slots %v", got)
	}
}

// liar reports usage that cannot be true.
type liar struct {
	*fake
	t engine.Timings
}

// Info says the liar keeps tenants apart, so what is checked here is the
// usage check alone, not the cap on a shared backend's reuse.
func (l liar) Info() engine.Info {
	info := l.fake.Info()
	info.Tenants = true
	return info
}

func (l liar) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	res, err := l.fake.Generate(ctx, req, func(ev engine.Event) error {
		if ev.First {
			ev.Timings = l.t
		}
		if stream == nil {
			return nil
		}
		return stream(ev)
	})
	res.Timings = l.t
	return res, err
}

// Usage that cannot be true is replaced by the router's own count, in the
// first event (the headers) and in the result (the usage object).
func TestImpossibleUsageIsReplaced(t *testing.T) {
	tests := []struct {
		name                          string
		reported                      engine.Timings
		maxTokens                     int
		wantPrompt, wantCached, wantG int // -1: the router's prompt length
	}{
		{"prompt tokens far beyond what was sent", engine.Timings{PromptTokens: 999998, CachedTokens: 10, GeneratedTokens: 2}, 0, -1, 10, 2},
		{"negative counts", engine.Timings{PromptTokens: -5, CachedTokens: -1, GeneratedTokens: -3}, 0, -1, 0, 2},
		{"cached beyond the prompt", engine.Timings{PromptTokens: 999998, CachedTokens: 999998, GeneratedTokens: 2}, 0, -1, -1, 2},
		{"more generated than asked", engine.Timings{PromptTokens: 999998, GeneratedTokens: 500}, 4, -1, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake("l")
			r, err := New(Config{HealthInterval: time.Hour}, []engine.Backend{liar{fake: f, t: tt.reported}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			msgs := conv(1, 1)
			sent, _ := f.Prompt(context.Background(), engine.Request{Messages: msgs})
			var first engine.Timings
			res, err := r.Generate(context.Background(), engine.Request{Messages: msgs, Slot: -1, MaxTokens: tt.maxTokens}, func(ev engine.Event) error {
				if ev.First {
					first = ev.Timings
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := engine.Timings{PromptTokens: tt.wantPrompt, CachedTokens: tt.wantCached, GeneratedTokens: tt.wantG}
			if want.PromptTokens == -1 {
				want.PromptTokens = len(sent)
			}
			if want.CachedTokens == -1 {
				want.CachedTokens = len(sent)
			}
			got := res.Timings
			if got.PromptTokens != want.PromptTokens || got.CachedTokens != want.CachedTokens || got.GeneratedTokens != want.GeneratedTokens {
				t.Fatalf("result usage prompt=%d cached=%d generated=%d, want %d %d %d",
					got.PromptTokens, got.CachedTokens, got.GeneratedTokens, want.PromptTokens, want.CachedTokens, want.GeneratedTokens)
			}
			if first.PromptTokens != want.PromptTokens || first.CachedTokens != want.CachedTokens {
				t.Fatalf("first event prompt=%d cached=%d, want %d %d", first.PromptTokens, first.CachedTokens, want.PromptTokens, want.CachedTokens)
			}
		})
	}
}

// Ready says whether anything can serve: the gateway's /health.
func TestReadyFollowsTheHealthOfTheFleet(t *testing.T) {
	a := newFake("a")
	a.health = errors.New("503")
	r := newRouter(t, Config{HealthInterval: 10 * time.Millisecond, HealthMaxBackoff: 20 * time.Millisecond}, a)
	for r.Ready() == nil {
		select {
		case <-r.Changed():
		case <-time.After(3 * time.Minute):
			t.Fatal("still ready with its only backend failing its checks")
		}
	}
	if err := r.Ready(); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Ready() = %v", err)
	}
	a.mu.Lock()
	a.health = nil
	a.mu.Unlock()
	for r.Ready() != nil {
		select {
		case <-r.Changed():
		case <-time.After(3 * time.Minute):
			t.Fatal("not ready after its backend came back")
		}
	}
}

// ctxFake is a backend whose context shrank (a node restarted with a
// smaller one): it refuses prompts that no longer fit, and reports its new
// context only once refreshed.
type ctxFake struct {
	*fake
	mu               sync.Mutex
	actual, reported int
}

func (c *ctxFake) Info() engine.Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.fake.Info()
	i.ContextSlot = c.reported
	return i
}

func (c *ctxFake) Refresh(context.Context) error {
	c.mu.Lock()
	c.reported = c.actual
	c.mu.Unlock()
	return nil
}

func (c *ctxFake) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	c.mu.Lock()
	actual := c.actual
	c.mu.Unlock()
	if len(req.Tokens) >= actual {
		return engine.Result{}, &engine.ContextLengthError{PromptTokens: len(req.Tokens), Limit: actual}
	}
	return c.fake.Generate(ctx, req, stream)
}

// A prompt the router believed fits a backend whose context shrank goes to
// another backend; the shrunk one is re-read. With no other backend, the
// client gets context_length_exceeded (nothing holds the prompt now).
func TestBackendWhoseContextShrankIsReReadAndSkipped(t *testing.T) {
	shrunk := &ctxFake{fake: newFake("shrunk"), actual: 64, reported: 4096}
	other := newFake("other")
	r, err := New(Config{Policy: PolicyRoundRobin, HealthInterval: time.Hour}, []engine.Backend{shrunk, other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 2 {
		if res := generate(t, r, conv(i, 1)); res.Backend != "other" {
			t.Fatalf("turn %d served by %s", i, res.Backend)
		}
	}
	if st := r.Status()[0]; st.ContextSlot != 64 || !st.Healthy {
		t.Fatalf("the shrunk backend after its refusal: %+v (want re-read, still healthy)", st)
	}

	alone := &ctxFake{fake: newFake("alone"), actual: 64, reported: 4096}
	r2, err := New(Config{HealthInterval: time.Hour}, []engine.Backend{alone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	_, err = r2.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
	var tooLong *engine.ContextLengthError
	if !errors.As(err, &tooLong) || tooLong.Limit != 64 {
		t.Fatalf("err %v, want the backend's context-length error", err)
	}
}
