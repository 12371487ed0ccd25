package router

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/engine/llamaserver/llamaservertest"
)

// placementRun is one policy's run of the conversations over fake
// llama-servers.
type placementRun struct {
	backends [][]string // per conversation, the backend of each turn
	prompt   int        // prompt tokens from the third turn on, as reported
	cached   int        // of them, reported reused
	computed int        // prompt tokens the servers computed, their own count
	oracle   int        // the oracle's prefill for the same turns
}

// runConversations sends convs conversations (two per system prompt) of
// turns turns each, turn by turn in interleaved order, through a router
// with policy over servers fake llama-servers of slots slots each.
func runConversations(t *testing.T, policy string, rules llamaservertest.Rules, servers, slots, convs, turns int) placementRun {
	t.Helper()
	ctx := context.Background()
	var fakes []*llamaservertest.Server
	var backends []engine.Backend
	for i := range servers {
		f := llamaservertest.Start(llamaservertest.Config{Slots: slots, Rules: rules})
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
	r, err := New(Config{Policy: policy}, backends, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	tok := backends[0].(*llamaserver.Backend)

	system := func(g int) string { return strings.Repeat(fmt.Sprintf("system prompt of group %d. ", g), 32)[:800] }
	history := make([][]engine.Message, convs)
	run := placementRun{backends: make([][]string, convs)}
	var prompts, held [][]int
	for turn := 1; turn <= turns; turn++ {
		for c := range convs {
			if turn == 1 {
				history[c] = []engine.Message{{Role: "system", Content: system(c / 2)}}
			}
			user := strings.Repeat(fmt.Sprintf("[%d.%d] question ", c, turn), 20)[:200]
			history[c] = append(history[c], engine.Message{Role: "user", Content: user})
			req := engine.Request{Messages: history[c], MaxTokens: 120, Slot: -1, Keep: -1}
			p, err := tok.Prompt(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Generate(ctx, req, nil)
			if err != nil {
				t.Fatalf("conversation %d turn %d: %v", c, turn, err)
			}
			run.backends[c] = append(run.backends[c], res.Backend)
			if turn >= 3 {
				run.prompt += res.Timings.PromptTokens
				run.cached += res.Timings.CachedTokens
			}
			history[c] = append(history[c], engine.Message{Role: "assistant", Content: res.Text})
			prompts = append(prompts, p)
			held = append(held, append(append([]int(nil), p...), llamaservertest.Encode(res.Text, false, false)...))
		}
	}
	for _, f := range fakes {
		run.computed += f.Counts().Computed
	}
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
// nearly every prompt token from the third turn on, and they compute
// little more than the oracle, and no more than under round-robin.
func TestConversationsKeepASlotEachOnLlamaServers(t *testing.T) {
	const servers, slots, convs, turns = 3, 2, 4, 8
	prefix := runConversations(t, PolicyPrefix, llamaservertest.Rules2026, servers, slots, convs, turns)
	rr := runConversations(t, PolicyRoundRobin, llamaservertest.Rules2026, servers, slots, convs, turns)
	for c, bs := range prefix.backends {
		for turn, b := range bs[1:] {
			if b != bs[0] {
				t.Errorf("conversation %d moved from %s to %s on turn %d: %v", c, bs[0], b, turn+2, bs)
				break
			}
		}
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
