package router

import (
	"context"
	"errors"
	"fmt"
	"kvwin/internal/ident"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// fake is a backend that renders prompts to byte tokens, records what it
// served and can be told to fail.
type fake struct {
	name       string
	slots      int
	mu         sync.Mutex
	served     []engine.Request
	fail       error // returned before any event
	failMid    error // returned after the first event
	health     error
	checked    chan struct{}
	slotTokens map[int][]int  // tokens per slot, to report cached tokens like a real server
	owner      map[int]string // the tenant whose request last ran on each slot
	leaked     int            // requests that reused a slot another tenant's request filled
	reused     int            // prompt tokens the last request reused, as the backend counts
	used       map[int]int    // when each slot was last used
	clock      int
}

func newFake(name string) *fake {
	return &fake{name: name, slots: 2, checked: make(chan struct{}, 64), slotTokens: map[int][]int{}, used: map[int]int{}, owner: map[int]string{}}
}

func (f *fake) Info() engine.Info {
	return engine.Info{Name: f.name, Model: "m", ContextSlot: 4096, Slots: f.slots}
}

func (f *fake) Prompt(_ context.Context, req engine.Request) ([]int, error) {
	var out []int
	for _, m := range req.Messages {
		for _, b := range []byte(m.Role + ":" + m.Content + "\n") {
			out = append(out, int(b))
		}
	}
	return out, nil
}

func (f *fake) Generate(_ context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	f.mu.Lock()
	f.served = append(f.served, req)
	fail, failMid := f.fail, f.failMid
	slot := req.Slot
	if slot < 0 { // as llama-server: the least recently used slot
		slot = 0
		for i := range f.slots {
			if f.used[i] < f.used[slot] {
				slot = i
			}
		}
	}
	f.clock++
	f.used[slot] = f.clock
	cached := 0
	for cached < len(req.Tokens)-1 && cached < len(f.slotTokens[slot]) && f.slotTokens[slot][cached] == req.Tokens[cached] {
		cached++
	}
	if req.NoCache { // as llama-server's cache_prompt false
		cached = 0
	}
	if cached > 0 && f.owner[slot] != req.Tenant {
		f.leaked++
	}
	f.slotTokens[slot], f.owner[slot], f.reused = req.Tokens, req.Tenant, cached
	f.mu.Unlock()
	if fail != nil {
		return engine.Result{}, fail
	}
	// Prefill costs 100 µs a token, as a small model on a CPU.
	t := engine.Timings{PromptTokens: len(req.Tokens), CachedTokens: cached, PromptEval: time.Duration(len(req.Tokens)-cached) * 100 * time.Microsecond}
	if stream != nil {
		if err := stream(engine.Event{First: true, Timings: t}); err != nil {
			return engine.Result{}, err
		}
	}
	if failMid != nil {
		return engine.Result{}, failMid
	}
	return engine.Result{Text: "ok", Tokens: []int{'o', 'k'}, Slot: slot, Timings: t, FinishReason: engine.FinishStop}, nil
}

func (f *fake) Health(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case f.checked <- struct{}{}:
	default:
	}
	return f.health
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.served)
}

func (f *fake) last() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[len(f.served)-1]
}

func newRouter(t *testing.T, cfg Config, fakes ...*fake) *Router {
	t.Helper()
	var bs []engine.Backend
	for _, f := range fakes {
		bs = append(bs, f)
	}
	r, err := New(cfg, bs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// conv is conversation i after some turns; conversations of the same group
// share their system prompt.
func conv(i, turns int) []engine.Message { return groupConv(i%2, i, turns) }

func groupConv(group, i, turns int) []engine.Message {
	msgs := []engine.Message{{Role: "system", Content: fmt.Sprintf("system prompt of group %d, long enough to fill several blocks of sixteen tokens each", group)}}
	for t := range turns {
		msgs = append(msgs, engine.Message{Role: "user", Content: fmt.Sprintf("conversation %d says turn %d with padding text", i, t)},
			engine.Message{Role: "assistant", Content: "ok"})
	}
	return msgs[:len(msgs)-1]
}

func generate(t *testing.T, r *Router, msgs []engine.Message) engine.Result {
	t.Helper()
	res, err := r.Generate(context.Background(), engine.Request{Messages: msgs, Slot: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestPrefixPolicyFollowsTheConversation(t *testing.T) {
	r := newRouter(t, Config{}, newFake("a"), newFake("b"), newFake("c"))
	homes := map[int]string{}
	for turn := 1; turn <= 4; turn++ {
		for i := range 6 {
			res := generate(t, r, conv(i, turn))
			if turn == 1 {
				homes[i] = res.Backend
				continue
			}
			if res.Backend != homes[i] {
				t.Fatalf("conversation %d turn %d went to %s, its prefix is on %s", i, turn, res.Backend, homes[i])
			}
		}
	}
	// Conversations sharing nothing spread over the fleet by rendezvous
	// hashing of their first block.
	used := map[string]bool{}
	for i := range 8 {
		used[generate(t, r, groupConv(100+i, i, 1)).Backend] = true
	}
	if len(used) < 2 {
		t.Fatalf("eight unrelated conversations all went to %v", used)
	}
}

func TestContinuationsArePinnedToTheirSlot(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	r := newRouter(t, Config{}, a, b)
	first := generate(t, r, groupConv(7, 7, 1))
	byName := map[string]*fake{"a": a, "b": b}
	for turn := 2; turn <= 3; turn++ {
		res := generate(t, r, groupConv(7, 7, turn))
		last := byName[res.Backend].last()
		if res.Backend != first.Backend || last.Slot != first.Slot || len(last.Tokens) == 0 || last.Messages != nil {
			t.Fatalf("turn %d: %s slot %d (%d tokens, %d messages); turn 1 ran on %s slot %d",
				turn, res.Backend, last.Slot, len(last.Tokens), len(last.Messages), first.Backend, first.Slot)
		}
	}
	// A new conversation sharing only the system prompt is not pinned.
	other := groupConv(7, 8, 1)
	other[1].Content += strings.Repeat(" and a long first message", 20)
	res := generate(t, r, other)
	if last := byName[res.Backend].last(); last.Slot >= 0 {
		t.Fatalf("a new conversation was pinned to slot %d", last.Slot)
	}
}

func TestReplicasAgreeOnNewConversations(t *testing.T) {
	r1 := newRouter(t, Config{}, newFake("a"), newFake("b"), newFake("c"))
	r2 := newRouter(t, Config{}, newFake("a"), newFake("b"), newFake("c"))
	for i := range 8 {
		if x, y := generate(t, r1, conv(i+10, 1)).Backend, generate(t, r2, conv(i+10, 1)).Backend; x != y {
			t.Fatalf("conversation %d: replica 1 chose %s, replica 2 %s", i, x, y)
		}
	}
}

func TestHotSpotGuardSendsToTheLeastLoaded(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	r := newRouter(t, Config{BalanceAbs: 2, BalanceRel: 2}, a, b)
	home := generate(t, r, conv(1, 1)).Backend
	hot, cold := r.members[0], r.members[1]
	if home == "b" {
		hot, cold = cold, hot
	}
	hot.load.Store(6) // six requests in flight on the prefix holder
	if got := generate(t, r, conv(1, 2)).Backend; got != cold.name {
		t.Fatalf("follow-up went to %s with load %d vs %d; the guard should pick %s", got, hot.load.Load(), cold.load.Load(), cold.name)
	}
	// Turn 2 now lives on the cold backend. Loaded by 2, not more, it still
	// gets turn 3: the guard is not triggered and the longest prefix wins.
	cold.load.Store(2)
	hot.load.Store(0)
	if got := generate(t, r, conv(1, 3)).Backend; got != cold.name {
		t.Fatalf("with load %d vs %d turn 3 went to %s, want the holder of turn 2, %s", cold.load.Load(), hot.load.Load(), got, cold.name)
	}
}

func TestFailover(t *testing.T) {
	t.Run("before the first byte: the next backend, the failed one marked down", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail, b.fail = fmt.Errorf("%w: connection refused", engine.ErrUnavailable), nil
		r := newRouter(t, Config{Policy: PolicyRoundRobin}, a, b)
		for range 3 {
			if res := generate(t, r, conv(1, 1)); res.Backend != "b" {
				t.Fatalf("served by %s", res.Backend)
			}
		}
		if r.members[0].state.Available() {
			t.Fatal("failed backend still healthy")
		}
	})
	t.Run("after the first byte: the error, no retry", func(t *testing.T) {
		a := newFake("a")
		a.failMid = errors.New("connection reset")
		b := newFake("b")
		r := newRouter(t, Config{Policy: PolicyRoundRobin}, a, b)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, func(engine.Event) error { return nil })
		if err == nil || b.count() != 0 {
			t.Fatalf("err %v, b served %d", err, b.count())
		}
	})
	t.Run("bad request: no retry", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail = engine.Invalid("bad")
		b.fail = engine.Invalid("bad")
		r := newRouter(t, Config{Policy: PolicyRoundRobin}, a, b)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
		if !errors.Is(err, engine.ErrInvalidRequest) || a.count()+b.count() != 1 {
			t.Fatalf("err %v after %d tries", err, a.count()+b.count())
		}
	})
	t.Run("all down: unavailable", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail = fmt.Errorf("%w: down", engine.ErrUnavailable)
		b.fail = a.fail
		r := newRouter(t, Config{}, a, b)
		for range 2 {
			if _, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil); !errors.Is(err, engine.ErrUnavailable) {
				t.Fatalf("err %v", err)
			}
		}
	})
}

func TestHealthChecksTakeBackendsOutAndBackIn(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	a.health = errors.New("503")
	r := newRouter(t, Config{HealthInterval: 20 * time.Millisecond, HealthMaxBackoff: 40 * time.Millisecond}, a, b)
	waitFor(t, func() bool { return !r.members[0].state.Available() })
	for range 4 {
		if res := generate(t, r, conv(3, 1)); res.Backend != "b" {
			t.Fatalf("served by %s while a is down", res.Backend)
		}
	}
	a.mu.Lock()
	a.health = nil
	a.mu.Unlock()
	waitFor(t, func() bool { return r.members[0].state.Available() })
}

// waitFor waits for cond, checking at each health check of the fakes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatal("condition not reached")
		case <-tick.C:
		}
	}
}

func TestRoundRobinCycles(t *testing.T) {
	a, b, c := newFake("a"), newFake("b"), newFake("c")
	r := newRouter(t, Config{Policy: PolicyRoundRobin}, a, b, c)
	var got []string
	for range 6 {
		got = append(got, generate(t, r, conv(1, 1)).Backend)
	}
	if fmt.Sprint(got) != "[a b c a b c]" {
		t.Fatalf("round-robin order %v", got)
	}
}

// snapFake is a backend that keeps displaced slots on disk (a kvwin node).
type snapFake struct{ *fake }

func (s snapFake) Info() engine.Info { i := s.fake.Info(); i.Snapshots = true; return i }

// A conversation displaced from a snapshotting backend's only slot is still
// held there (on its disk): its next turn goes back, not to an empty peer.
func TestDisplacedConversationsStayWithASnapshottingBackend(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	a.slots = 1
	r, err := New(Config{}, []engine.Backend{snapFake{a}, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := groupConv(1, 1, 1)
	x[1].Content += strings.Repeat(" with a long first message", 12)
	r.members[1].state.down() // the first conversation starts on a
	if res := generate(t, r, x); res.Backend != "a" {
		t.Fatalf("first turn on %s", res.Backend)
	}
	r.members[1].state.pass()
	// Another conversation takes a's only slot.
	if _, err := r.Generate(context.Background(), engine.Request{Messages: groupConv(2, 2, 1), Slot: 0}, nil); err != nil {
		t.Fatal(err)
	}
	if held := r.reg.Held(kvcache.Location{Backend: "a", Slot: 0}); len(held) == 0 {
		t.Fatal("slot 0 holds nothing")
	}
	next := append(append([]engine.Message{}, x...), engine.Message{Role: "assistant", Content: "ok"}, engine.Message{Role: "user", Content: "more"})
	if res := generate(t, r, next); res.Backend != "a" {
		t.Fatalf("the displaced conversation went to %s; its snapshot is on a", res.Backend)
	}
}

type countingFake struct{ *fake }

func (c countingFake) CountMessage(engine.Message) int { return 42 }

// The gateway's window counts tokens with a healthy backend's tokenizer.
func TestCountMessageUsesAHealthyBackend(t *testing.T) {
	r, err := New(Config{}, []engine.Backend{countingFake{newFake("a")}, newFake("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := engine.Message{Role: "user", Content: strings.Repeat("x", 400)}
	if got := r.CountMessage(m); got != 42 {
		t.Fatalf("count %d, want the backend's 42", got)
	}
	r.members[0].state.down()
	if got := r.CountMessage(m); got != 105 { // (4+400+3)/4 + 4
		t.Fatalf("count %d without a counting backend, want the byte estimate 105", got)
	}
}

// tenantFake is a fake that keeps tenants apart itself, as a kvwin node
// holding our admin key does.
type tenantFake struct{ *fake }

func (f tenantFake) Info() engine.Info {
	info := f.fake.Info()
	info.Tenants = true
	info.SharesPrefixes = true // a kvwin node
	return info
}

// TestCachedTokensNeverExceedTheTenantsOwnPrefix: a backend that reuses any
// client's prefix (llama-server) reports tenant B's copy of A's prompt as
// cached; B is told 0, in the result and the stream, while A resending her
// prompt is told her reuse. A backend keeping tenants apart is believed.
func TestCachedTokensNeverExceedTheTenantsOwnPrefix(t *testing.T) {
	send := func(r *Router, tenant string, msgs []engine.Message) (engine.Result, int) {
		t.Helper()
		streamed := -1
		res, err := r.Generate(context.Background(), engine.Request{Messages: msgs, Slot: -1, Owner: ident.Owner{Tenant: tenant}}, func(ev engine.Event) error {
			if ev.First {
				streamed = ev.Timings.CachedTokens
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res, streamed
	}
	f := newFake("a")
	f.slots = 1
	r := newRouter(t, Config{}, f)
	secret := conv(3, 2)
	send(r, "alice", secret)
	res, streamed := send(r, "bob", secret)
	if res.Timings.CachedTokens != 0 || streamed != 0 {
		t.Fatalf("bob told %d cached (stream %d) of alice's prompt", res.Timings.CachedTokens, streamed)
	}
	send(r, "alice", secret) // alice's again: the backend reused it, and her registry holds it
	res, streamed = send(r, "alice", secret)
	if res.Timings.CachedTokens < res.Timings.PromptTokens/2 || streamed != res.Timings.CachedTokens {
		t.Fatalf("alice told %d cached (stream %d) of her own %d-token prompt", res.Timings.CachedTokens, streamed, res.Timings.PromptTokens)
	}

	g := newFake("b")
	g.slots = 1
	r2, err := New(Config{}, []engine.Backend{tenantFake{g}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r2.Close() })
	send(r2, "alice", secret)
	if res, _ := send(r2, "bob", secret); res.Timings.CachedTokens == 0 {
		t.Fatal("a backend that keeps tenants apart was not believed")
	}
}
