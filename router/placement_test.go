package router

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/engine/llamaserver/llamaservertest"
	"kvwin/kvcache"
)

// placementRun is one policy's run of the conversations over fake
// llama-servers.
type placementRun struct {
	backends [][]string // per conversation, the backend of each turn
	prompt   int        // prompt tokens from the third turn on, as reported
	cached   int        // of them, reported reused
	computed int        // prompt tokens the servers computed, their own count
	oracle   int        // the oracle's prefill for the same turns
	restores int        // backends the router found restoring what their slots gave up
	warnings []string   // the router's warnings
}

// logLines is a log destination keeping its lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.Split(strings.TrimSpace(string(p)), "\n")...)
	return len(p), nil
}

// runConversations sends convs conversations (two per system prompt) of
// turns turns each, turn by turn in interleaved order, through a router
// with policy over servers fake llama-servers of slots slots each.
func runConversations(t *testing.T, policy string, rules llamaservertest.Rules, servers, slots, convs, turns, inflight int) placementRun {
	return runConversationsOn(t, policy, llamaservertest.Config{Slots: slots, Rules: rules}, servers, convs, turns, inflight)
}

// runConversationsOn is runConversations over fakes of cfg.
func runConversationsOn(t *testing.T, policy string, cfg llamaservertest.Config, servers, convs, turns, inflight int) placementRun {
	t.Helper()
	ctx := context.Background()
	var fakes []*llamaservertest.Server
	var backends []engine.Backend
	for i := range servers {
		f := llamaservertest.Start(cfg)
		t.Cleanup(f.Close)
		b, err := llamaserver.New(llamaserver.Config{BaseURL: f.URL(), Name: fmt.Sprintf("ls%d", i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		if _, err := b.LoadProps(ctx); err != nil {
			t.Fatal(err)
		}
		fakes, backends = append(fakes, f), append(backends, b)
	}
	logs := &logLines{}
	r, err := New(Config{Policy: policy}, backends, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	tok := backends[0].(*llamaserver.Backend)

	system := func(g int) string { return strings.Repeat(fmt.Sprintf("system prompt of group %d. ", g), 32)[:800] }
	run := placementRun{backends: make([][]string, convs)}
	var (
		mu            sync.Mutex
		prompts, held [][]int // in the order the turns ended
		wg            sync.WaitGroup
		errs          = make(chan error, inflight)
	)
	// Each of inflight goroutines runs its share of the conversations,
	// turn by turn, interleaved.
	for g := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			history := map[int][]engine.Message{}
			for turn := 1; turn <= turns; turn++ {
				for c := g; c < convs; c += inflight {
					if turn == 1 {
						history[c] = []engine.Message{{Role: "system", Content: system(c / 2)}}
					}
					user := strings.Repeat(fmt.Sprintf("[%d.%d] question ", c, turn), 20)[:200]
					history[c] = append(history[c], engine.Message{Role: "user", Content: user})
					req := engine.Request{Messages: history[c], MaxTokens: 120, Slot: -1, Keep: -1}
					p, err := tok.Prompt(ctx, req)
					if err != nil {
						errs <- err
						return
					}
					res, err := r.Generate(ctx, req, nil)
					if err != nil {
						errs <- fmt.Errorf("conversation %d turn %d: %w", c, turn, err)
						return
					}
					history[c] = append(history[c], engine.Message{Role: "assistant", Content: res.Text})
					mu.Lock()
					run.backends[c] = append(run.backends[c], res.Backend)
					if turn >= 3 {
						run.prompt += res.Timings.PromptTokens
						run.cached += res.Timings.CachedTokens
					}
					prompts = append(prompts, p)
					held = append(held, append(append([]int(nil), p...), llamaservertest.Encode(res.Text, false, false)...))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, f := range fakes {
		run.computed += f.Counts().Computed
	}
	for _, m := range r.members {
		if m.restores.Load() {
			run.restores++
		}
	}
	logs.mu.Lock()
	run.warnings = append([]string(nil), logs.lines...)
	logs.mu.Unlock()
	for i, p := range prompts {
		best := 0
		for _, h := range held[:i] {
			n := 0
			for n < min(len(p), len(h)) && p[n] == h[n] {
				n++
			}
			best = max(best, n)
		}
		run.oracle += len(p) - best
	}
	return run
}

// Over llama-servers, whose slots reuse only their own KV, four
// conversations (two per system prompt) on three servers of two slots each
// keep a slot each: none moves after its first turn, the servers reuse
// nearly every prompt token from the third turn on, the router warns of
// nothing (no usage that cannot be true), and they compute
// little more than the oracle, and no more than under round-robin.
func TestConversationsKeepASlotEachOnLlamaServers(t *testing.T) {
	builds := []struct {
		name string
		cfg  llamaservertest.Config
	}{
		{"2026-08 --cache-ram 0", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2026}},
		{"2026-08", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2026, PromptCache: true}},
		{"2025-06", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2025}}, // no timings.cache_n
	}
	for _, inflight := range []int{1, 2} {
		for _, b := range builds {
			t.Run(fmt.Sprintf("%s, %d in flight", b.name, inflight), func(t *testing.T) {
				conversationsKeepASlotEach(t, inflight, b.cfg)
			})
		}
	}
}

func conversationsKeepASlotEach(t *testing.T, inflight int, cfg llamaservertest.Config) {
	const servers, convs, turns = 3, 4, 8
	prefix := runConversationsOn(t, PolicyPrefix, cfg, servers, convs, turns, inflight)
	rr := runConversationsOn(t, PolicyRoundRobin, cfg, servers, convs, turns, inflight)
	for c, bs := range prefix.backends {
		for turn, b := range bs[1:] {
			if b != bs[0] {
				t.Errorf("conversation %d moved from %s to %s on turn %d: %v", c, bs[0], b, turn+2, bs)
				break
			}
		}
	}
	if len(prefix.warnings) > 0 {
		t.Errorf("the router warned: %q", prefix.warnings)
	}
	if share := float64(prefix.cached) / float64(prefix.prompt); share < 0.85 {
		t.Errorf("reported cached share from the third turn on is %.3f (%d of %d), want ≥ 0.85", share, prefix.cached, prefix.prompt)
	}
	if ratio := float64(prefix.computed) / float64(prefix.oracle); ratio > 1.25 {
		t.Errorf("servers computed %d prompt tokens, %.2f× the oracle's %d, want ≤ 1.25×", prefix.computed, ratio, prefix.oracle)
	}
	if prefix.computed > rr.computed {
		t.Errorf("prefix routing made the servers compute %d prompt tokens, round-robin %d", prefix.computed, rr.computed)
	}
	t.Logf("computed: prefix %d, round-robin %d, oracle %d (%.2f×, %.2f×)", prefix.computed, rr.computed, prefix.oracle,
		float64(prefix.computed)/float64(prefix.oracle), float64(rr.computed)/float64(rr.oracle))
}

// Six conversations on two servers of two slots, one turn at a time (so
// the counts are the same every run): some must share a slot, and the
// least valuable one is taken; the servers still compute no more than
// under round-robin, on either build's rules.
func TestMoreConversationsThanSlots(t *testing.T) {
	for _, rules := range []llamaservertest.Rules{llamaservertest.Rules2026, llamaservertest.Rules2025} {
		prefix := runConversations(t, PolicyPrefix, rules, 2, 2, 6, 8, 1)
		rr := runConversations(t, PolicyRoundRobin, rules, 2, 2, 6, 8, 1)
		if prefix.computed > rr.computed {
			t.Errorf("rules %d: prefix routing made the servers compute %d prompt tokens, round-robin %d", rules, prefix.computed, rr.computed)
		}
		t.Logf("rules %d: computed: prefix %d, round-robin %d, oracle %d; restoring %d", rules, prefix.computed, rr.computed, prefix.oracle, prefix.restores)
	}
	// With llama-server's prompt cache, what a slot gives up comes back:
	// the router learns it from the reuse reported (a turn reusing more
	// than its slot held) and counts on it from then on. (Round-robin,
	// which the server's cache serves from the first turn, computes
	// less here one turn at a time: the router learns the cache only on
	// the third or fourth turn.)
	cached := llamaservertest.Config{Slots: 2, PromptCache: true}
	prefix := runConversationsOn(t, PolicyPrefix, cached, 2, 6, 8, 1)
	rr := runConversationsOn(t, PolicyRoundRobin, cached, 2, 6, 8, 1)
	if prefix.restores == 0 || float64(prefix.computed) > 1.5*float64(prefix.oracle) {
		t.Errorf("prompt cache: %d backends found restoring; the servers computed %d prompt tokens, want ≤ 1.5× the oracle's %d", prefix.restores, prefix.computed, prefix.oracle)
	}
	t.Logf("prompt cache: computed: prefix %d, round-robin %d, oracle %d; restoring %d", prefix.computed, rr.computed, prefix.oracle, prefix.restores)
}

// The slot a turn takes on a backend whose slots reuse only their own KV
// (placement.go): a free slot before a sibling's sharing the system prompt
// while any slot is free; once none is, the least valuable, where a
// shared prefix outweighing twice the evicted suffix wins.
func TestBestPlan(t *testing.T) {
	const length = 1000
	own := slotPlan{slot: 0, reuse: 900, heldTokens: 900}                    // this conversation's own chain
	free := slotPlan{slot: 1}                                                // empty
	sibling := slotPlan{slot: 2, reuse: 800, heldTokens: 1100, evicted: 300} // shares an 800-token system prompt
	stranger := slotPlan{slot: 3, heldTokens: 2000, evicted: 2000}           // shares nothing
	short := slotPlan{slot: 4, reuse: 100, heldTokens: 600, evicted: 500}
	for _, tc := range []struct {
		name  string
		plans []slotPlan
		room  bool
		want  int
	}{
		{"own slot", []slotPlan{free, own, sibling}, true, 0},
		{"free before a sibling", []slotPlan{sibling, free}, true, 1},
		{"room elsewhere: a sibling before a stranger", []slotPlan{sibling, stranger}, true, 2},
		{"none free: the shared prefix outweighs twice the suffix", []slotPlan{stranger, sibling, short}, false, 2},
		{"none free: the least valuable", []slotPlan{stranger, short}, false, 4},
		{"all busy", nil, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bestPlan(tc.plans, length, tc.room); got.slot != tc.want {
				t.Errorf("slot %d (cost %d), want %d", got.slot, got.cost(length, tc.room), tc.want)
			}
		})
	}
}

// What evicting a chain destroys is weighed by its depth and idle time
// while some slot is free (which chains have ended), by its idle time
// alone once none is (every placement evicts a live chain).
func TestDestroyedWeighsByDepthOnlyWhileASlotIsFree(t *testing.T) {
	p := slotPlan{slot: 0, heldTokens: 1000, evicted: 1000, stale: 0.875, staleIdle: 0.25, weighed: true}
	for _, c := range []struct {
		room bool
		want int
	}{{true, 125}, {false, 750}} {
		if got := p.destroyed(c.room); got != c.want {
			t.Errorf("room %v: destroyed %d, want %d", c.room, got, c.want)
		}
	}
}

// A branch of the slot's own chain (a retry, a regenerate, an edit of the
// last message) destroys only the tail it overwrites, once, weighed by the
// chance the chain is continued (whole while nothing is known of it); a
// chain the prompt is no branch of is worth all of it while a slot is
// free.
func TestABranchDestroysOnlyItsTail(t *testing.T) {
	branch := slotPlan{reuse: 900, heldTokens: 1000, evicted: 100, branch: true}
	weighed := branch
	weighed.stale, weighed.staleIdle, weighed.weighed = 0.75, 0.5, true
	sibling := branch
	sibling.branch = false
	for _, c := range []struct {
		name string
		p    slotPlan
		room bool
		want int
	}{
		{"liveness unknown, a slot free", branch, true, 100},
		{"liveness unknown, none free", branch, false, 100},
		{"by depth and idle time while a slot is free", weighed, true, 25},
		{"by idle time once none is", weighed, false, 50},
		{"no branch, a slot free", sibling, true, 1000},
	} {
		if got := c.p.destroyed(c.room); got != c.want {
			t.Errorf("%s: destroyed %d, want %d", c.name, got, c.want)
		}
	}
}

// On a backend with a prompt cache (llama-server's --cache-ram), only a
// slot keeping less than half of what it holds is swapped with the cache:
// its chain is saved and the best held prompt loaded, less what that
// prompt, if another conversation's, loses past the shared prefix. A slot
// keeping half or more is overwritten as without the cache, and an empty
// slot loads nothing (llama.cpp #28139).
func TestRestorablePlans(t *testing.T) {
	const length, best, lost = 1200, 1100, 300
	empty := slotPlan{slot: 0}
	kept := slotPlan{slot: 1, slotReuse: 800, reuse: 800, heldTokens: 1400, evicted: 600} // keeps 800 of 1,400: not swapped
	swapped := slotPlan{slot: 2, slotReuse: 100, reuse: 100, heldTokens: 1500, evicted: 1400}
	got := restorable([]slotPlan{empty, kept, swapped}, best, length, lost)
	want := []struct{ reuse, evicted, destroyed int }{
		{0, 0, 0},
		{800, 600, 1400}, // all of its chain while a slot is free (room)
		{best, 0, lost},
	}
	for i, w := range want {
		if p := got[i]; p.reuse != w.reuse || p.evicted != w.evicted || p.destroyed(true) != w.destroyed {
			t.Errorf("slot %d: reuse %d, evicted %d, destroyed %d; want %d, %d, %d", p.slot, p.reuse, p.evicted, p.destroyed(true), w.reuse, w.evicted, w.destroyed)
		}
	}
	// The empty slot computes the prompt whole: with the kept slot's
	// chain counted, the swapped slot is the cheapest.
	if p := bestPlan(got, length, true); p.slot != 2 {
		t.Errorf("best plan: slot %d, want the swapped slot 2", p.slot)
	}
}

// What the router remembers of a prompt cache follows the server's: a
// swap that loads another conversation's saved prompt (sharing only the
// system prompt) loses that prompt past the shared prefix, counted whole
// while the router knows too little of liveness; loading a conversation's
// own saved chain loses nothing; a prompt the server loaded leaves its
// cache, and the router's memory of it too; and a restore that finds less
// than the router expected drops that prompt and the ones saved before
// it (the server's cache drops the oldest first).
func TestPromptCacheLoadsAreWeighedAndForgotten(t *testing.T) {
	r := newRouter(t, Config{}, newFake("a"))
	m := r.members[0]
	block := r.exact.BlockTokens()
	system := tokenRange(0, 4*block)
	sibling := r.exact.Tokens(append(slices.Clone(system), tokenRange(10_000, 6*block)...))
	own := r.exact.Tokens(append(slices.Clone(system), tokenRange(20_000, 2*block)...))
	m.remember(r.reg, sibling)
	saved := func(c kvcache.Chain) kvcache.Kept {
		_, s, _ := r.bestMatches(key{exact: c, length: c.Length})
		return s[m.name]
	}
	// A new conversation of the same system prompt: the sibling's saved
	// prompt is what a swap loads, and its six blocks past it are lost.
	newcomer := r.exact.Tokens(append(slices.Clone(system), tokenRange(30_000, block)...))
	if got, want := r.loadLoses(newcomer, saved(newcomer), true), 6*block; got != want {
		t.Errorf("a newcomer's swap loses %d tokens, want the sibling's %d past the system prompt", got, want)
	}
	m.remember(r.reg, own)
	next := r.exact.Tokens(append(append(slices.Clone(system), tokenRange(20_000, 2*block)...), tokenRange(40_000, block)...))
	if sn := saved(next); sn.Blocks != len(own.Keys) {
		t.Fatalf("best saved match for the conversation's next turn: %d blocks, want its own %d", sn.Blocks, len(own.Keys))
	} else if got := r.loadLoses(next, sn, true); got != 0 {
		t.Errorf("loading the conversation's own chain loses %d tokens, want 0", got)
	}
	m.swapped(r.reg, next, next.Units(len(own.Keys)))
	if sn := saved(next); sn.Blocks != 4 || sn.Snapshot == "" {
		t.Errorf("after the server loaded it: best saved match %d blocks (%q), want the sibling's 4 shared", sn.Blocks, sn.Snapshot)
	}
	if slices.Contains(m.snapIDs, snapshotID(own.Keys[len(own.Keys)-1])) {
		t.Error("the loaded chain is still remembered")
	}
	// A swap that reused less than the saved prompt expected: the server
	// no longer held it, nor the prompts saved before it.
	third := r.exact.Tokens(append(slices.Clone(system), tokenRange(50_000, 3*block)...))
	m.remember(r.reg, own)
	m.remember(r.reg, third)
	m.swapped(r.reg, next, next.Units(4))
	if sn := saved(next); sn.Snapshot != snapshotID(third.Keys[len(third.Keys)-1]) {
		t.Errorf("after a missed restore: best saved match %q (%d blocks), want the prompt saved after it", sn.Snapshot, sn.Blocks)
	}
	for _, c := range []kvcache.Chain{sibling, own} {
		if slices.Contains(m.snapIDs, snapshotID(c.Keys[len(c.Keys)-1])) {
			t.Errorf("a prompt saved before the missed one (%d blocks) is still remembered", len(c.Keys))
		}
	}
	if !slices.Contains(m.snapIDs, snapshotID(third.Keys[len(third.Keys)-1])) {
		t.Error("the prompt saved after the missed one was forgotten")
	}
}
