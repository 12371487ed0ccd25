package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/wire"
	"kvwin/kvcache"
)

// nodeSaved reads what node's journal says its snapshot store holds: the
// snapshot its events stream opens with.
func nodeSaved(t *testing.T, node *app.App) []kvcache.SavedTokens {
	t.Helper()
	return nodeJournal(t, node).Snapshots
}

// nodeJournal reads the snapshot node's events stream opens with.
func nodeJournal(t *testing.T, node *app.App) kvcache.JournalEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", node.URL()+"/kvwin/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+node.Config().AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ev kvcache.JournalEvent
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type != kvcache.EventSnapshot {
		t.Fatalf("journal opened with %s (%v)", line, err)
	}
	return ev
}

// engineMetric reads one kvwin_engine_ sample of node's /metrics.
func engineMetric(t *testing.T, node *app.App, name string) float64 {
	t.Helper()
	_, _, body := send(t, "GET", node.URL()+"/metrics", "", "", map[string]string{"Authorization": "Bearer " + node.Config().AdminKey})
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "kvwin_engine_"+name+"{") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			return v
		}
	}
	t.Fatalf("no kvwin_engine_%s in the node's metrics", name)
	return 0
}

// waitGatewaySnapshots waits until gw's registry holds at least n
// snapshots that nodes published.
func waitGatewaySnapshots(t *testing.T, gw *app.App, n int) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := gw.Router().Changed()
		got := 0
		for _, b := range gw.Router().Registry().Snapshot().Backends {
			got += b.Snapshots
		}
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("gateway's registry holds %d snapshots, want >= %d", got, n)
		}
	}
}

// TestFleetRestoresReturningConversationsFromTheirNodesSnapshots: three
// nodes of one slot behind a gateway, six conversations taking turns, so
// every returning turn finds its slot taken by another conversation. The
// nodes publish their snapshots (in RAM on two nodes, on disk only on the
// third); the gateway sends each returning turn to the node holding its
// snapshot, which reports the restored tokens as cached, and the prompt
// tokens computed stay within 1.1× of a router that never loses a
// conversation. A DELETE of every conversation then leaves no snapshot in
// RAM or on disk on any node.
func TestFleetRestoresReturningConversationsFromTheirNodesSnapshots(t *testing.T) {
	const nodeAdmin = "node-admin-key-0123456789" // the nodes keep tenants and conversations apart
	var nodes []*app.App
	var specs []string
	for i := range 3 {
		node := apptest.Start(t, func(f *app.Config) {
			f.Slots, f.Ctx, f.AdminKey = 1, 4096, nodeAdmin
			if i < 2 {
				f.KVRAM = 256 << 20
			}
		})
		nodes = append(nodes, node)
		specs = append(specs, "llamaserver="+node.URL())
	}
	gw := apptest.Start(t, func(f *app.Config) { f.Backends, f.BackendKey = specs, nodeAdmin })
	waitFollowing(t, gw)

	const convs, rounds = 6, 3
	msgs := make([][]map[string]string, convs)
	for i := range msgs {
		msgs[i] = apptest.Msgs("system", apptest.Words(200+i, 500), "user", apptest.Words(300+i, 400))
	}
	prev := make([]int, convs)
	computed, oracle, returning, restored := 0, 0, 0, 0
	for round := range rounds {
		for i := range msgs {
			if round > 0 {
				waitGatewaySnapshots(t, gw, 3) // the user paused: the node's save reached the gateway
			}
			id := fmt.Sprintf("conv-%d", i)
			tr := apptest.PostWith(t, gw.URL(), map[string]string{wire.HeaderConversation: id},
				map[string]any{"messages": msgs[i], "max_tokens": 8, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("%s round %d: %d %s", id, round, tr.Status, tr.Body)
			}
			computed += tr.Prompt - tr.Cached
			oracle += tr.Prompt - prev[i] // a router that never loses it computes only what is new
			if round > 0 {
				returning++
				if tr.Cached >= prev[i]*9/10 {
					restored++
				}
				t.Logf("%s round %d on %s: cached %d of %d (previous prompt %d)", id, round, tr.Header.Get(wire.HeaderBackend), tr.Cached, tr.Prompt, prev[i])
			}
			prev[i] = tr.Prompt
			msgs[i] = append(msgs[i], apptest.Msgs("assistant", tr.Content, "user", apptest.Words(400+round*10+i, 40))...)
		}
	}
	var ram, disk float64
	for _, n := range nodes {
		ram += engineMetric(t, n, "snapshot_ram_restores_total")
		disk += engineMetric(t, n, "snapshot_disk_restores_total")
		if rs := nodeJournal(t, n).Restore; rs != nil {
			t.Logf("node %s restores %.0f tokens/s from RAM, %.0f from disk (measured, published)", n.URL(), rs.RAM, rs.Disk)
		}
	}
	t.Logf("prompt tokens computed %d, never-losing router %d (%.3f×); %d of %d returning turns restored; restores: %v from RAM, %v from disk",
		computed, oracle, float64(computed)/float64(oracle), restored, returning, ram, disk)
	if restored < returning*9/10 || float64(computed) > 1.1*float64(oracle) {
		t.Fatalf("restored %d of %d returning turns; computed %d prompt tokens, %.3f× the never-losing router's %d", restored, returning, computed, float64(computed)/float64(oracle), oracle)
	}
	if ram+disk == 0 {
		t.Fatalf("no snapshot restored: the returning turns were served from live slots, not the case under test")
	}

	for i := range msgs {
		status, _, _ := send(t, "DELETE", gw.URL()+fmt.Sprintf("/kvwin/v1/conversations/conv-%d", i), "", "", nil)
		if status != 204 {
			t.Fatalf("deleting conv-%d: %d", i, status)
		}
	}
	for i, n := range nodes {
		files, _ := filepath.Glob(filepath.Join(n.Config().DataDir, "snapshots", "*.kvsnap"))
		if saved := nodeSaved(t, n); len(saved) != 0 || len(files) != 0 || engineMetric(t, n, "snapshot_ram_bytes") != 0 {
			t.Fatalf("node %d after the deletes: journal lists %d snapshots, %d files on disk, %v bytes in RAM", i, len(saved), len(files), engineMetric(t, n, "snapshot_ram_bytes"))
		}
	}
}

// waitSaved waits until gw's router says the backend named name published
// exactly want snapshots per tier.
func waitSaved(t *testing.T, gw *app.App, name string, want map[string]int) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := gw.Router().Changed()
		var got map[string]int
		for _, st := range gw.Router().Status() {
			if st.Name == name {
				got = st.Saved
			}
		}
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("gateway %s sees %s's snapshots as %v, want %v", gw.URL(), name, got, want)
		}
	}
}

// TestNodeRestartEmptiesItsRAMTierOnEveryGateway: a node with a RAM tier
// of about one snapshot holds three conversations' snapshots, in RAM and
// on disk, and two gateways see them by tier. The node restarts on the
// same address and data dir: its RAM tier is empty, its disk tier found
// again, and both gateways learn it from their next journal resume (a new
// epoch: a snapshot event), without a turn.
func TestNodeRestartEmptiesItsRAMTierOnEveryGateway(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.KVRAM, f.KVRAMTenantPercent = 1, 4096, 600_000, 100 })
	dataDir, addr := node.Config().DataDir, node.Addr()
	spec := "llamaserver=" + node.URL()
	gws := []*app.App{
		apptest.Start(t, func(f *app.Config) { f.Backends = []string{spec} }),
		apptest.Start(t, func(f *app.Config) { f.Backends = []string{spec} }),
	}
	for _, gw := range gws {
		waitFollowing(t, gw)
	}
	for i := range 4 { // the slot keeps the last; three are saved
		tr := apptest.Post(t, gws[0], map[string]any{"messages": apptest.Msgs("system", apptest.Words(500+i, 500), "user", apptest.Words(600+i, 400)), "max_tokens": 4, "temperature": 0})
		if tr.Status != 200 {
			t.Fatalf("conversation %d: %d %s", i, tr.Status, tr.Body)
		}
	}
	before := map[string]int{}
	for _, sv := range nodeSaved(t, node) {
		before[sv.Tier.String()]++
	}
	if before["ram"] == 0 || before["disk"] == 0 {
		t.Fatalf("the node holds %v snapshots by tier; want both tiers", before)
	}
	name := gws[0].Router().Status()[0].Name
	for _, gw := range gws {
		waitSaved(t, gw, name, before)
	}
	node.Abort()
	restarted := apptest.Start(t, func(f *app.Config) {
		f.Addr, f.DataDir, f.Slots, f.Ctx, f.KVRAM, f.KVRAMTenantPercent = addr, dataDir, 1, 4096, 600_000, 100
	})
	after := map[string]int{}
	for _, sv := range nodeSaved(t, restarted) {
		after[sv.Tier.String()]++
	}
	if after["ram"] != 0 || after["disk"] != before["disk"] {
		t.Fatalf("after the restart the node holds %v; want no RAM and the %d on disk", after, before["disk"])
	}
	for _, gw := range gws {
		waitSaved(t, gw, name, after)
	}
	t.Logf("before the restart %v, after %v; both gateways agree", before, after)
}
