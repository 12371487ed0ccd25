package app_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/router"
)

// heldOn is how many blocks a's registry holds on the backend named name.
func heldOn(a *app.App, name string) int {
	for _, b := range a.Router().Registry().Snapshot().Backends {
		if b.Name == name {
			return b.BlocksHeld
		}
	}
	return 0
}

// waitHeld waits, on a's router's change signal, until a's registry holds
// at least blocks on the backend named name.
func waitHeld(t *testing.T, a *app.App, name string, blocks int) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := a.Router().Changed()
		if heldOn(a, name) >= blocks {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("gateway's registry holds %d blocks on %s, want >= %d: the node's journal did not reach it", heldOn(a, name), name, blocks)
		}
	}
}

// waitFollowing waits until a's router follows every backend's journal.
func waitFollowing(t *testing.T, a *app.App) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := a.Router().Changed()
		all := true
		for _, b := range a.Router().Status() {
			all = all && b.Residency == router.ResidencyEvents
		}
		if all {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("backends' residency %+v, want all %q", a.Router().Status(), router.ResidencyEvents)
		}
	}
}

// TestFleetResidencyAcrossGateways: two gateways with registries of their
// own, the same config, over two kvwin nodes. A long system prompt placed
// on a node through gateway A shows up in gateway B's registry there (B
// never routed to it: only the node's journal can have told it), and a new
// conversation with the same prompt sent through B goes to that node and
// reuses it, for three prompts in a row.
func TestFleetResidencyAcrossGateways(t *testing.T) {
	var specs []string
	for range 2 {
		node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 4, 4096 })
		specs = append(specs, "llamaserver="+node.URL())
	}
	gw := func() *app.App { return apptest.Start(t, func(f *app.Config) { f.Backends = specs }) }
	a, b := gw(), gw()
	waitFollowing(t, a)
	waitFollowing(t, b)
	const block = 16
	for i := range 3 {
		before := map[string]int{}
		for _, st := range b.Router().Registry().Snapshot().Backends {
			before[st.Name] = st.BlocksHeld
		}
		system := fmt.Sprintf("You are assistant number %d. ", i) + apptest.Words(100+i, 1600)
		first := apptest.Post(t, a, map[string]any{"model": "kvwin-tiny", "max_tokens": 4,
			"messages": apptest.Msgs("system", system, "user", "hello there")})
		if first.Status != 200 {
			t.Fatalf("prompt %d through A: %d %s", i, first.Status, first.Body)
		}
		node := first.Header.Get("X-Kvwin-Backend")
		// What A's turn left on the node, system prompt and all, reaches B.
		waitHeld(t, b, node, before[node]+first.Prompt*9/10/block)
		second := apptest.Post(t, b, map[string]any{"model": "kvwin-tiny", "max_tokens": 4,
			"messages": apptest.Msgs("system", system, "user", "a different question")})
		if second.Status != 200 {
			t.Fatalf("prompt %d through B: %d %s", i, second.Status, second.Body)
		}
		ratio := float64(second.Cached) / float64(second.Prompt)
		t.Logf("prompt %d: placed on %s through A (%d tokens); through B: %s, cached %d of %d (%.3f)",
			i, node, first.Prompt, second.Header.Get("X-Kvwin-Backend"), second.Cached, second.Prompt, ratio)
		if got := second.Header.Get("X-Kvwin-Backend"); got != node {
			t.Errorf("prompt %d: B routed to %s, want %s where A placed it", i, got, node)
		}
		if ratio < 0.9 {
			t.Errorf("prompt %d: B's turn reused %d of %d prompt tokens (%.3f), want >= 0.9", i, second.Cached, second.Prompt, ratio)
		}
	}
}

// vllmGauges reads the vLLM-compatible gauges from a's /metrics.
func vllmGauges(t *testing.T, a *app.App) map[string]float64 {
	t.Helper()
	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "vllm:") {
			continue
		}
		if !strings.Contains(rest, `model_name="kvwin-tiny"`) {
			t.Errorf("%s without the model_name label: %s", name, line)
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out[name] = v
	}
	return out
}

// TestNodeExportsVLLMGauges: a node under load reports, under vLLM's
// names, the requests running in its one slot, those waiting for it, and
// the share of its KV cache in use.
func TestNodeExportsVLLMGauges(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 4096 })
	idle := vllmGauges(t, node)
	if idle["vllm:num_requests_running"] != 0 || idle["vllm:num_requests_waiting"] != 0 || idle["vllm:kv_cache_usage_perc"] != 0 {
		t.Fatalf("an idle node: %v, want all 0", idle)
	}
	// Three long prompts for one slot: one runs while two wait.
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			s, _, body, err := postTurn(node.URL(), apptest.Words(300+i, 2800))
			if err == nil && s != 200 {
				err = fmt.Errorf("%d %s", s, body)
			}
			done <- err
		}()
	}
	seen := map[string]float64{}
	tick := time.NewTicker(5 * time.Millisecond) // /metrics has no change signal: it is read until it shows the load
	defer tick.Stop()
	deadline := time.After(3 * time.Minute)
	finished := 0
	for finished < 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		case <-tick.C:
			g := vllmGauges(t, node)
			// Admitted but not yet in the slot counts as waiting: all three
			// may wait for an instant.
			if g["vllm:num_requests_running"] > 1 || g["vllm:kv_cache_usage_perc"] > 1 || g["vllm:num_requests_running"]+g["vllm:num_requests_waiting"] > 3 {
				t.Fatalf("gauges out of range for one slot and three requests: %v", g)
			}
			for k, v := range g {
				seen[k] = max(seen[k], v)
			}
		case <-deadline:
			t.Fatal("the three turns did not finish")
		}
	}
	if seen["vllm:num_requests_running"] != 1 || seen["vllm:num_requests_waiting"] < 1 {
		t.Errorf("under load, at most: %v; want 1 running and some waiting", seen)
	}
	after := vllmGauges(t, node)
	// The slot keeps the last prompt's KV (about 2,800 of 4,096 cells).
	if after["vllm:num_requests_running"] != 0 || after["vllm:num_requests_waiting"] != 0 || after["vllm:kv_cache_usage_perc"] < 0.5 {
		t.Errorf("after the load: %v, want none running or waiting and the slot's KV > half the cache", after)
	}
	t.Logf("under load (max seen): %v; after: %v", seen, after)
}

// TestFleetResidencyAcrossGatewaysKeepsTenantsApart: the same over nodes
// that keep tenants apart (the gateways hold their admin key): a prefix
// alice placed through A is reused by alice's new conversation through B,
// and never by bob's with the same prompt.
func TestFleetResidencyAcrossGatewaysKeepsTenantsApart(t *testing.T) {
	const nodeAdmin = "node-admin-key-0123456789"
	var specs []string
	for range 2 {
		node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.AdminKey = 4, 4096, nodeAdmin })
		specs = append(specs, "llamaserver="+node.URL())
	}
	gw := func() *app.App {
		return apptest.Start(t, func(f *app.Config) {
			f.Backends, f.BackendKey = specs, nodeAdmin
			f.APIKeys = []string{"alice=alice-key-0123456789", "bob=bob-key-0123456789ab"}
		})
	}
	a, b := gw(), gw()
	waitFollowing(t, a)
	waitFollowing(t, b)
	system := "You are the tenants' assistant. " + apptest.Words(7, 1600)
	chat := func(g *app.App, key, user string) apptest.Turn {
		tr := apptest.PostWith(t, g.URL(), map[string]string{"Authorization": "Bearer " + key}, map[string]any{
			"model": "kvwin-tiny", "max_tokens": 4, "messages": apptest.Msgs("system", system, "user", user)})
		if tr.Status != 200 {
			t.Fatalf("%d %s", tr.Status, tr.Body)
		}
		return tr
	}
	before := map[string]int{}
	for _, st := range b.Router().Registry().Snapshot().Backends {
		before[st.Name] = st.BlocksHeld
	}
	first := chat(a, "alice-key-0123456789", "hello there")
	node := first.Header.Get("X-Kvwin-Backend")
	waitHeld(t, b, node, before[node]+first.Prompt*9/10/16)
	mine := chat(b, "alice-key-0123456789", "a different question")
	theirs := chat(b, "bob-key-0123456789ab", "a different question")
	t.Logf("alice through B: %s cached %d of %d; bob through B: %s cached %d of %d",
		mine.Header.Get("X-Kvwin-Backend"), mine.Cached, mine.Prompt, theirs.Header.Get("X-Kvwin-Backend"), theirs.Cached, theirs.Prompt)
	if mine.Header.Get("X-Kvwin-Backend") != node || mine.Cached*10 < mine.Prompt*9 {
		t.Errorf("alice through B: %s cached %d of %d, want %s and >= 90%%", mine.Header.Get("X-Kvwin-Backend"), mine.Cached, mine.Prompt, node)
	}
	if theirs.Cached*10 >= theirs.Prompt {
		t.Errorf("bob reused %d of %d prompt tokens of alice's prefix", theirs.Cached, theirs.Prompt)
	}
}
