package app_test

import (
	"encoding/json"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func registryTotals(t *testing.T, a *app.App) map[string]int64 {
	t.Helper()
	resp, err := http.Get(a.URL() + "/kvwin/v1/registry")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Totals   map[string]int64 `json:"totals"`
		Backends []json.RawMessage
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"blocks_held", "hits", "misses", "evictions", "snapshot_saves", "snapshot_restores", "snapshot_bytes"} {
		if _, ok := body.Totals[k]; !ok {
			t.Fatalf("registry totals lack %q: %v", k, body.Totals)
		}
	}
	return body.Totals
}

// Three conversations of ~1,500 tokens take turns on 2 slots of 2,048: the
// KV cannot hold all three, so each returning turn comes back from a
// snapshot, not a prefill.
func TestReturningConversationsAreRestoredFromSnapshots(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.WindowBudget = 2, 2048, 2000 })
	convs := make([][]map[string]string, 3)
	for i := range convs {
		convs[i] = apptest.Msgs("system", apptest.Words(40+i, 600), "user", apptest.Words(50+i, 900))
	}
	prev := make([]int, 3)
	var lastTurn []map[string]string
	var lastAnswer string
	for round := range 3 {
		for i := range convs {
			tr := apptest.Post(t, a, map[string]any{"messages": convs[i], "max_tokens": 8, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("conversation %d round %d: %d %s", i, round, tr.Status, tr.Body)
			}
			if round > 0 && float64(tr.Cached) < 0.9*float64(prev[i]) {
				t.Fatalf("conversation %d round %d: cached %d of a previous prompt of %d (< 90%%)", i, round, tr.Cached, prev[i])
			}
			prev[i] = tr.Prompt
			lastTurn, lastAnswer = convs[i], tr.Content
			convs[i] = append(convs[i], apptest.Msgs("assistant", tr.Content, "user", apptest.Words(60+round*3+i, 60))...)
		}
	}
	totals := registryTotals(t, a)
	if totals["snapshot_restores"] < 6 || totals["snapshot_saves"] < 1 {
		t.Fatalf("registry totals %v: want a restore for every returning turn (6)", totals)
	}
	files, _ := filepath.Glob(filepath.Join(a.Config().DataDir, "snapshots", "*.kvsnap"))
	if len(files) == 0 || totals["snapshot_bytes"] <= 0 {
		t.Fatalf("%d snapshot files, %d bytes", len(files), totals["snapshot_bytes"])
	}
	// The restored turn answers exactly as a cold server does.
	cold := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.WindowBudget, f.NoSnapshots = 2, 2048, 2000, true })
	tr := apptest.Post(t, cold, map[string]any{"messages": lastTurn, "max_tokens": 8, "temperature": 0})
	if tr.Cached != 0 || tr.Content != lastAnswer {
		t.Fatalf("cold server: cached %d, answer %q; restored answer %q", tr.Cached, tr.Content, lastAnswer)
	}
}

func TestCorruptSnapshotFallsBackToAPrefill(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	conv := apptest.Msgs("system", apptest.Words(70, 600), "user", apptest.Words(71, 700))
	first := apptest.Post(t, a, map[string]any{"messages": conv, "max_tokens": 8, "temperature": 0})
	other := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(72, 700)), "max_tokens": 8, "temperature": 0})
	if first.Status != 200 || other.Status != 200 {
		t.Fatal("setup requests failed")
	}
	// The displaced conversation's snapshot is written after the other's
	// turn answered (saves are queued): wait for its file.
	var files []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) { // a hang guard
		files, _ = filepath.Glob(filepath.Join(a.Config().DataDir, "snapshots", "*.kvsnap"))
		if len(files) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(files) != 1 {
		t.Fatalf("%d snapshots, want the first conversation's", len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-10] ^= 0xff
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	again := apptest.Post(t, a, map[string]any{"messages": conv, "max_tokens": 8, "temperature": 0})
	if again.Status != 200 || again.Content != first.Content {
		t.Fatalf("after corruption: status %d answer %q, want %q", again.Status, again.Content, first.Content)
	}
	if again.Cached > 16 { // nothing but what the other conversation shares (BOS, markers)
		t.Fatalf("a corrupt snapshot was used: cached %d", again.Cached)
	}
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Fatalf("corrupt snapshot not deleted: %v", err)
	}
}

// metricValue reads one sample of /metrics by its full name (labels
// included as written), -1 if absent.
func metricValue(t *testing.T, a *app.App, prefix string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, a), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// A snapshot whose write fails (here: its directory is gone, a file in its
// place) is counted in /metrics, not only logged.
func TestFailedSnapshotSavesAreCounted(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	if got := metricValue(t, a, "kvwin_engine_snapshot_save_failures_total"); got != 0 {
		t.Fatalf("save failures before any save: %v", got)
	}
	dir := filepath.Join(a.Config().DataDir, "snapshots")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The second conversation takes the only slot: the first one's KV is
	// saved, and the save fails.
	for i := range 2 {
		if tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(300+i, 700)), "max_tokens": 4}); tr.Status != 200 {
			t.Fatalf("conversation %d: %d %s", i, tr.Status, tr.Body)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for metricValue(t, a, "kvwin_engine_snapshot_save_failures_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no save failure counted; saves %v", metricValue(t, a, "kvwin_engine_snapshot_saves_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
