package app_test

import (
	"fmt"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/llamaserver/llamaservertest"
)

// A client's retry, a "regenerate" button, an agent re-asking: the same
// request sent again. Its prompt is a prefix of the chain its backend's
// slot holds (the prompt and the answer), and taking that slot again
// destroys only the answer's tail (router/placement.go, Branches). So the
// repeat, plain then streamed, computes at most two tokens, on the backend
// that holds it; and the next turn, which extends the regenerated answer,
// stays there too.

// retryTurn is what one turn of a retry conversation cost: the backend
// that answered and the prompt tokens the fleet computed for it.
type retryTurn struct {
	backend  string
	computed int
	prompt   int
}

// retryConversation sends a conversation of two turns, the second again
// (plain, then streamed), then its next turn, to gw; computed says what
// the fleet has computed so far, summed over its servers. It returns the
// five turns.
func retryConversation(t *testing.T, gw *app.App, computed func(apptest.Turn) int) []retryTurn {
	t.Helper()
	msgs := apptest.Msgs("system", "You answer tersely. "+apptest.Words(3, 1400), "user", "First question. "+apptest.Words(4, 200))
	var out []retryTurn
	send := func(stream bool) apptest.Turn {
		tr := apptest.Post(t, gw, map[string]any{"messages": msgs, "max_tokens": 24, "temperature": 0, "stream": stream})
		if tr.Status != 200 {
			t.Fatalf("turn %d: %d %s", len(out)+1, tr.Status, tr.Body)
		}
		out = append(out, retryTurn{backend: tr.Header.Get("X-Kvwin-Backend"), computed: computed(tr), prompt: tr.Prompt})
		return tr
	}
	answer := send(false).Content
	msgs = append(msgs, map[string]string{"role": "assistant", "content": answer}, map[string]string{"role": "user", "content": "Second question. " + apptest.Words(5, 150)})
	send(false)
	send(false) // the same request again
	answer = send(true).Content
	msgs = append(msgs, map[string]string{"role": "assistant", "content": answer}, map[string]string{"role": "user", "content": "Third question. " + apptest.Words(6, 120)})
	send(true)
	return out
}

// checkRetries checks the turns of retryConversation: each repeat computed
// at most two tokens on the second turn's backend, and the next turn stayed
// there, computing no more than what its prompt adds to the repeat's.
func checkRetries(t *testing.T, turns []retryTurn) {
	t.Helper()
	if len(turns) != 5 {
		t.Fatalf("%d turns", len(turns))
	}
	home := turns[1].backend
	for i, name := range []string{"the repeat", "the streamed repeat"} {
		tr := turns[2+i]
		if tr.backend != home || tr.computed > 2 {
			t.Errorf("%s: on %s, computed %d of %d prompt tokens; want ≤ 2 on %s, where the request just ran", name, tr.backend, tr.computed, tr.prompt, home)
		}
	}
	next := turns[4]
	if grew := next.prompt - turns[3].prompt; next.backend != home || next.computed > grew+24 {
		t.Errorf("the next turn: on %s, computed %d of %d prompt tokens (%d new since the repeat); want it on %s, computing only what is new",
			next.backend, next.computed, next.prompt, grew, home)
	}
	t.Logf("turns: %+v", turns)
}

// TestGatewayKeepsARetryWhereItsChainIs: over three llama-servers of
// either build's slot rules (the fake of llamaservertest; the August 2026
// build with and without its prompt cache), two slots each, so slots stand
// free elsewhere while the request's backend holds it.
func TestGatewayKeepsARetryWhereItsChainIs(t *testing.T) {
	builds := []struct {
		name string
		cfg  llamaservertest.Config
	}{
		{"2025-06", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2025}},
		{"2026-08 --cache-ram 0", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2026}},
		{"2026-08", llamaservertest.Config{Slots: 2, Rules: llamaservertest.Rules2026, PromptCache: true}},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			var fakes []*llamaservertest.Server
			var specs []string
			for range 3 {
				f := llamaservertest.Start(b.cfg)
				t.Cleanup(f.Close)
				fakes, specs = append(fakes, f), append(specs, "llamaserver="+f.URL())
			}
			gw := apptest.Start(t, func(f *app.Config) { f.Backends, f.Route = specs, "prefix" })
			last := 0
			computed := func(apptest.Turn) int {
				sum := 0
				for _, f := range fakes {
					sum += f.Counts().Computed
				}
				d := sum - last
				last = sum
				return d
			}
			checkRetries(t, retryConversation(t, gw, computed))
		})
	}
}

// TestGatewayKeepsARetryWhereItsChainIsOnBuildShapes: the same over three
// llamaFakes, which answer in each build's shapes and serve /slots as it
// does (the June 2025 build not at all, the August 2026 build with counts
// only, read by the gateway and believed).
func TestGatewayKeepsARetryWhereItsChainIsOnBuildShapes(t *testing.T) {
	for _, build := range llamaBuilds {
		t.Run(build, func(t *testing.T) {
			fakes := []*llamaFake{startLlamaFake(t, build, 2), startLlamaFake(t, build, 2), startLlamaFake(t, build, 2)}
			gw := startLlamaGateway(t, nil, fakes...)
			checkRetries(t, retryConversation(t, gw, func(tr apptest.Turn) int {
				for _, f := range fakes {
					if strings.HasSuffix(f.URL(), tr.Header.Get("X-Kvwin-Backend")) {
						return tr.Prompt - f.lastReused()
					}
				}
				t.Fatalf("no fake is %s", tr.Header.Get("X-Kvwin-Backend"))
				return 0
			}))
		})
	}
}

// TestGatewayKeepsARetryWhereItsChainIsOnKvwinNodes: the same over three
// real kvwin nodes of two slots, with snapshots (the nodes choose their
// slots) and without (the gateway plans them while a slot is empty), each
// turn's computed tokens as the node reports them (prompt − cached).
func TestGatewayKeepsARetryWhereItsChainIsOnKvwinNodes(t *testing.T) {
	for _, snapshots := range []bool{true, false} {
		t.Run(fmt.Sprintf("snapshots=%v", snapshots), func(t *testing.T) {
			var specs []string
			for range 3 {
				node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.NoSnapshots = 2, 4096, !snapshots })
				specs = append(specs, "llamaserver="+node.URL())
			}
			gw := apptest.Start(t, func(f *app.Config) { f.Backends, f.Route = specs, "prefix" })
			checkRetries(t, retryConversation(t, gw, func(tr apptest.Turn) int { return tr.Prompt - tr.Cached }))
		})
	}
}
