package router

import (
	"context"
	"errors"
	"fmt"
	"kvwin/internal/ident"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"kvwin/engine"
)

// pinFake runs a request on the slot it names, as llama-server does.
type pinFake struct{ *fake }

func (pinFake) PinsSlots() bool { return true }

var _ engine.SlotPinner = pinFake{}

// pinTenantFake also keeps tenants apart itself (a kvwin node that
// trusts the gateway's key).
type pinTenantFake struct{ tenantFake }

func (pinTenantFake) PinsSlots() bool { return true }

// served is one turn as the backend saw it.
type served struct {
	slot          int
	noCache       bool
	slotOnly      bool
	cached, total int
}

func turn(t *testing.T, r *Router, f *fake, tenant string, msgs []engine.Message) served {
	t.Helper()
	res, err := r.Generate(context.Background(), engine.Request{Messages: msgs, Slot: -1, Owner: ident.Owner{Tenant: tenant}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := f.last()
	// The backend's own count: what it reused, before the router caps it.
	f.mu.Lock()
	defer f.mu.Unlock()
	return served{slot: res.Slot, noCache: last.NoCache, slotOnly: last.SlotOnly, cached: f.reused, total: len(last.Tokens)}
}

// TestTenantsNeverReuseEachOthersKV: on a backend that reuses any prefix
// (llama-server), a gateway with several tenants pins each turn and lets it
// reuse only a slot its own tenant filled: bob sending alice's exact prompt
// computes all of it, alice resending hers reuses it. Bob goes to an empty
// slot rather than evict alice's while one is free.
func TestTenantsNeverReuseEachOthersKV(t *testing.T) {
	secret := conv(3, 2)
	for _, tc := range []struct {
		name  string
		slots int
		// who sends the secret, in order, and whether the backend may
		// reuse (cache) for each turn
		turns []string
		reuse []bool
		slot  []int
	}{
		{"two slots", 2, []string{"alice", "bob", "alice", "bob"}, []bool{false, false, true, true}, []int{0, 1, 0, 1}},
		{"one slot", 1, []string{"alice", "bob", "alice", "alice"}, []bool{false, false, false, true}, []int{0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake("ls")
			f.slots = tc.slots
			r, err := New(Config{IsolateTenants: true}, []engine.Backend{pinFake{f}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			for i, tenant := range tc.turns {
				got := turn(t, r, f, tenant, secret)
				if got.slot != tc.slot[i] || got.noCache == tc.reuse[i] || !got.slotOnly {
					t.Fatalf("turn %d (%s): slot %d, cache_prompt %v; want slot %d, cache_prompt %v",
						i, tenant, got.slot, !got.noCache, tc.slot[i], tc.reuse[i])
				}
				if tc.reuse[i] && got.cached < got.total-1 {
					t.Fatalf("turn %d (%s): reused %d of its own %d tokens", i, tenant, got.cached, got.total)
				}
				if !tc.reuse[i] && got.cached != 0 {
					t.Fatalf("turn %d (%s): the backend reused %d tokens", i, tenant, got.cached)
				}
			}
			if f.leaked != 0 {
				t.Fatalf("%d turns reused KV of another tenant", f.leaked)
			}
		})
	}
}

// TestIsolationLeavesOthersAsTheyWere: without keys (one tenant) the router
// pins and reuses as before (on a llama-server, whose slots reuse only
// their own KV, every turn goes to the slot it planned, the first one
// too: placement.go); a backend that cannot be pinned (Ollama) and
// one that keeps tenants apart (a kvwin node with our key) are not pinned
// for isolation and never sent NoCache (Ollama refuses it). The kvwin
// node's first turn is pinned to its empty slot all the same, as the
// slot plan pins any turn on a kvwin node while one of its slots is
// empty (placement.go, plansEarly).
func TestIsolationLeavesOthersAsTheyWere(t *testing.T) {
	secret := conv(3, 2)
	for _, tc := range []struct {
		name      string
		isolate   bool
		backend   func(*fake) engine.Backend
		tenants   []string
		firstSlot int // the slot the first turn is sent to
	}{
		{"no keys", false, func(f *fake) engine.Backend { return pinFake{f} }, []string{"default", "default", "default"}, 0},
		{"not pinnable", true, func(f *fake) engine.Backend { return f }, []string{"alice", "bob", "alice"}, -1},
		{"keeps tenants apart", true, func(f *fake) engine.Backend { return pinTenantFake{tenantFake{f}} }, []string{"alice", "bob", "alice"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake("b")
			f.slots = 1
			r, err := New(Config{IsolateTenants: tc.isolate}, []engine.Backend{tc.backend(f)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			for i, tenant := range tc.tenants {
				got := turn(t, r, f, tenant, secret)
				if req := f.last(); req.NoCache || req.SlotOnly || (i == 0 && req.Slot != tc.firstSlot) {
					t.Fatalf("turn %d: sent slot %d, no_cache %v; want the router's old choice", i, req.Slot, req.NoCache)
				}
				// The backend reuses the secret from the second turn on,
				// whoever sent it: as before, for better (one tenant) or
				// worse (Ollama; the node keeps tenants apart itself).
				if i > 0 && got.cached < got.total-1 {
					t.Fatalf("turn %d: the backend reused %d of %d", i, got.cached, got.total)
				}
			}
		})
	}
}

// TestClaimChoosesOwnThenEmptyThenLeastRecent: the slot choice of
// tenancy.go, step by step, on a member's owners table.
func TestClaimChoosesOwnThenEmptyThenLeastRecent(t *testing.T) {
	m := &member{}
	m.slots.Store(3)
	type step struct {
		tenant              string
		holdingSlot, cached int // registry: slot holding cached of 100 tokens
		slot                int
		reuse               bool
		settle              bool // settle the claim (ran on its slot, ok)
	}
	for i, s := range []step{
		{"a", -1, 0, 0, false, true},  // all unknown: the first
		{"b", -1, 0, 1, false, true},  // an unknown slot before a's
		{"a", 0, 50, 0, true, true},   // a's own slot holding half its prompt
		{"c", -1, 0, 2, false, false}, // the last unknown slot; left busy
		{"a", 0, 5, 0, true, true},    // a's own slot holds 5%: not chosen for that; a's own idle slot still wins over b's
		{"b", -1, 0, 1, true, true},   // b's own
		{"c", -1, 0, 0, false, true},  // its own slot busy: an idle one, the least recently used (a's)
		{"d", -1, 0, 1, false, true},  // no own, none unknown: the least recently used (b's)
		{"a", 0, 90, 0, false, true},  // the registry's slot is c's now: chosen as least recent, not reused
		{"e", -1, 0, 1, false, false}, // left busy
		{"f", -1, 0, 0, false, false}, // left busy: now every slot is
		{"e", -1, 0, 2, false, false}, // all busy: fewest turns, then least recent
		{"e", -1, 0, 1, false, false}, // its own slot, but busy: not reused
	} {
		p, err := m.claim(context.Background(), s.tenant, -1, s.holdingSlot, s.cached, 100)
		if err != nil || p.slot != s.slot || p.reuse != s.reuse {
			t.Fatalf("step %d (%s): slot %d reuse %v (%v), want slot %d reuse %v (owners %+v)", i, s.tenant, p.slot, p.reuse, err, s.slot, s.reuse, m.owners)
		}
		if s.settle {
			m.settle(p, p.slot, true)
		}
	}
	// A failed turn, or one the backend ran elsewhere, leaves its slot
	// unknown: never reused on the router's word.
	m = &member{}
	m.slots.Store(2)
	claim := func(tenant string, asked int) pin {
		t.Helper()
		p, err := m.claim(context.Background(), tenant, asked, -1, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	m.settle(claim("a", 1), -1, false)
	if m.owners[1].tenant != "" {
		t.Fatalf("failed turn left slot 1 as %q's", m.owners[1].tenant)
	}
	m.settle(claim("e", 0), 1, true)
	if m.owners[0].tenant != "" || m.owners[1].tenant != "e" {
		t.Fatalf("a turn run elsewhere: owners %+v", m.owners)
	}
	// A backend that rejoins holds nothing the router knows of.
	m.forgetOwners(0)
	if p := claim("e", -1); p.reuse {
		t.Fatalf("slot %d reused after the backend rejoined", p.slot)
	}
}

// TestNoOtherTenantOvertakesAReusingTurn: while a turn that may reuse a
// slot is on its way, another tenant's turn is not sent there (it might
// arrive first and leave its KV to be reused); it waits for the slot.
func TestNoOtherTenantOvertakesAReusingTurn(t *testing.T) {
	m := &member{}
	m.slots.Store(1)
	ctx := context.Background()
	first, _ := m.claim(ctx, "alice", -1, -1, 0, 100)
	m.settle(first, first.slot, true)
	mine, _ := m.claim(ctx, "alice", -1, -1, 0, 100)
	if !mine.reuse {
		t.Fatal("alice's second turn may not reuse her idle slot")
	}
	// Alice's own next turn may queue behind it, reusing nothing.
	if p, err := m.claim(ctx, "alice", -1, -1, 0, 100); err != nil || p.reuse {
		t.Fatalf("alice's queued turn: %+v %v", p, err)
	} else {
		defer m.settle(p, p.slot, true)
	}
	// Bob's waits: it gives up with its context, or gets the slot once
	// alice's turn is settled.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.claim(cancelled, "bob", -1, -1, 0, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("bob's claim with an ended context: %v", err)
	}
	got := make(chan pin, 1)
	m.ownMu.Lock()
	p, ok := m.tryClaim("bob", -1, -1, 0, 100)
	m.ownMu.Unlock()
	if ok {
		t.Fatalf("bob got slot %d while alice's reusing turn was on its way", p.slot)
	}
	go func() {
		p, _ := m.claim(ctx, "bob", -1, -1, 0, 100)
		got <- p
	}()
	m.settle(mine, mine.slot, true)
	select {
	case p := <-got:
		if p.slot != 0 || p.reuse {
			t.Fatalf("bob after alice: %+v", p)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("bob's claim did not wake when alice's turn was settled")
	}
}

// TestRandomTrafficNeverLeaks: whatever order tenants send shared and
// private prompts in, the backend never reuses a slot another tenant
// filled, and a tenant repeating itself on an idle backend reuses.
func TestRandomTrafficNeverLeaks(t *testing.T) {
	f := newFake("ls")
	f.slots = 3
	r, err := New(Config{IsolateTenants: true}, []engine.Backend{pinFake{f}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	tenants := []string{"alice", "bob", "carol", "dave"}
	reused := 0
	for i := range 300 {
		tenant := tenants[rng.IntN(len(tenants))]
		msgs := conv(rng.IntN(3), 1+rng.IntN(3)) // prompts shared across tenants
		got := turn(t, r, f, tenant, msgs)
		if got.cached > 0 {
			reused++
		}
		if i%50 == 49 {
			again := turn(t, r, f, tenant, msgs)
			if again.cached < again.total-1 {
				t.Fatalf("turn %d: %s repeating its prompt reused %d of %d", i, tenant, again.cached, again.total)
			}
		}
	}
	if f.leaked != 0 {
		t.Fatalf("%d of 300 turns reused KV another tenant computed", f.leaked)
	}
	if reused == 0 {
		t.Fatal("no turn reused anything: isolation by never caching")
	}
	t.Logf("%d of 300 turns reused their own tenant's KV", reused)
}

// TestPinRefusedRetriesWithoutCache: when the backend refuses the router's
// pin (it restarted with fewer slots), the turn is pinned again to a slot
// it has, reusing nothing there.
func TestPinRefusedRetriesWithoutCache(t *testing.T) {
	f := newFake("ls")
	f.slots = 2
	rp := refusingPin{pinFake{f}, new(atomic.Int64)}
	rp.limit.Store(2)
	r, err := New(Config{IsolateTenants: true}, []engine.Backend{rp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	turn(t, r, f, "alice", conv(1, 1))      // slot 0
	rp.limit.Store(1)                       // restarted with one slot; the router still plans for two
	got := turn(t, r, f, "bob", conv(1, 1)) // slot 1 refused, then slot 0
	if req := f.last(); req.Slot != 0 || !req.NoCache || got.cached != 0 || f.leaked != 0 {
		t.Fatalf("retry sent slot %d no_cache %v, reused %d (%d leaks)", req.Slot, req.NoCache, got.cached, f.leaked)
	}
}

// refusingPin refuses a slot it does not have, as a node restarted with
// fewer slots does.
type refusingPin struct {
	pinFake
	limit *atomic.Int64 // slots it has
}

func (p refusingPin) Info() engine.Info {
	info := p.fake.Info()
	info.Slots = int(p.limit.Load())
	return info
}

func (p refusingPin) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	if req.Slot >= int(p.limit.Load()) {
		return engine.Result{}, fmt.Errorf("slot %d: %w", req.Slot, engine.ErrInvalidRequest)
	}
	return p.pinFake.Generate(ctx, req, stream)
}
