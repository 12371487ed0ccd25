package app_test

import (
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// A gateway in front of a backend that reuses any client's prefix (here a
// kvwin node the gateway has no key for, which sees every request as one
// tenant, as a llama-server does) must not let one tenant reuse KV another
// computed: a reused prefix shows in the time to first token. What the
// node itself decoded is the judge, not what the gateway reports.

// nodeCounts are a node's own counts of prompt tokens.
type nodeCounts struct{ decoded, cached int64 }

func countsOf(node *app.App) nodeCounts {
	st := node.Engine().Stats()
	return nodeCounts{decoded: st.PromptDecoded.Load(), cached: st.CachedTokens.Load()}
}

// sendCounted sends one chat turn to the gateway and returns what the node
// did for it: prompt tokens decoded and reused.
func sendCounted(t *testing.T, gw, node *app.App, headers map[string]string, msgs []map[string]string) (apptest.Turn, nodeCounts) {
	t.Helper()
	before := countsOf(node)
	tr := apptest.PostWith(t, gw.URL(), headers, map[string]any{"messages": msgs, "max_tokens": 2, "temperature": 0})
	if tr.Status != 200 {
		t.Fatalf("status %d: %s", tr.Status, tr.Body)
	}
	after := countsOf(node)
	return tr, nodeCounts{decoded: after.decoded - before.decoded, cached: after.cached - before.cached}
}

func TestTenantsReuseNoKVOfOthersOnABackendThatShares(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots = 2 }) // no keys: every caller is one tenant to it
	prompt := apptest.Msgs("system", "Private notes of alice. "+apptest.Words(11, 900), "user", "My password is hunter2-"+apptest.Words(12, 300))

	t.Run("keys", func(t *testing.T) {
		gw := apptest.Start(t, func(f *app.Config) {
			withKeys(f)
			f.Backends = []string{"llamaserver=" + node.URL()} // no --backend-api-key
		})
		first, n0 := sendCounted(t, gw, node, bearer(aliceKey), prompt)
		bob, n1 := sendCounted(t, gw, node, bearer(bobKey), prompt)
		alice, n2 := sendCounted(t, gw, node, bearer(aliceKey), prompt)
		bobAgain, n3 := sendCounted(t, gw, node, bearer(bobKey), prompt)
		p := int64(first.Prompt)
		if p < 1000 || int64(bob.Prompt) != p || int64(alice.Prompt) != p {
			t.Fatalf("prompt tokens %d %d %d", first.Prompt, bob.Prompt, alice.Prompt)
		}
		// Bob sending alice's exact prompt: the node computed every token.
		if n1.decoded != p || n1.cached != 0 || bob.Cached != 0 {
			t.Fatalf("bob: the node decoded %d and reused %d of %d (gateway said %d cached)", n1.decoded, n1.cached, p, bob.Cached)
		}
		// Alice and bob repeating their own prompts reuse them.
		for who, n := range map[string]nodeCounts{"alice": n2, "bob": n3} {
			if n.decoded > 2 || n.cached < p-2 {
				t.Fatalf("%s repeating: the node decoded %d and reused %d of %d", who, n.decoded, n.cached, p)
			}
		}
		t.Logf("keys: %d-token prompt; the node decoded alice %d, bob %d (reused %d), alice again %d (reused %d), bob again %d; gateway told %d/%d/%d/%d cached",
			p, n0.decoded, n1.decoded, n1.cached, n2.decoded, n2.cached, n3.decoded, first.Cached, bob.Cached, alice.Cached, bobAgain.Cached)
	})

	t.Run("own slot holds less than another's", func(t *testing.T) {
		// Alice's slot holds the head of a prompt, bob's slot all of it:
		// alice sending all of it is pinned to her slot and reuses only
		// what she sent; the node copies nothing from bob's slot.
		node := apptest.Start(t, func(f *app.Config) { f.Slots = 2 })
		gw := apptest.Start(t, func(f *app.Config) {
			withKeys(f)
			f.Backends = []string{"llamaserver=" + node.URL()}
		})
		system := "Shared handbook. " + apptest.Words(21, 900)
		head := apptest.Msgs("system", system, "user", "Hello.")
		whole := apptest.Msgs("system", system, "user", "Bob's question "+apptest.Words(22, 300))
		mine, _ := sendCounted(t, gw, node, bearer(aliceKey), head)
		_, nb := sendCounted(t, gw, node, bearer(bobKey), whole)
		alice, na := sendCounted(t, gw, node, bearer(aliceKey), whole)
		p, own := int64(alice.Prompt), int64(mine.Prompt)
		if nb.cached != 0 {
			t.Fatalf("bob reused %d of alice's tokens", nb.cached)
		}
		if na.cached > own || na.decoded < p-own || na.cached < own/2 {
			t.Fatalf("alice: the node decoded %d and reused %d of %d; she had sent %d", na.decoded, na.cached, p, own)
		}
		t.Logf("own slot: alice sent %d tokens, then %d: the node reused %d, decoded %d", own, p, na.cached, na.decoded)
	})

	t.Run("no keys", func(t *testing.T) {
		// One tenant: the node reuses the prompt its first sender left, as
		// before; nothing is pinned or uncached for isolation.
		gw := apptest.Start(t, func(f *app.Config) { f.Backends = []string{"llamaserver=" + node.URL()} })
		other := apptest.Msgs("system", "Shared notes. "+apptest.Words(13, 900), "user", "Question "+apptest.Words(14, 300))
		first, n0 := sendCounted(t, gw, node, nil, other)
		again, n1 := sendCounted(t, gw, node, nil, other)
		p := int64(first.Prompt)
		if n0.decoded < p/2 || n1.decoded > 2 || n1.cached < p-2 || int64(again.Cached) < p-16 {
			t.Fatalf("no keys: the node decoded %d then %d (reused %d) of %d; gateway told %d cached", n0.decoded, n1.decoded, n1.cached, p, again.Cached)
		}
		t.Logf("no keys: %d-token prompt; the node decoded %d, then %d (reused %d)", p, n0.decoded, n1.decoded, n1.cached)
	})
}
