package load

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/queue"
)

// TestMain removes the test model the servers of this binary shared.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// kvwin bench load against a real server: completed streams are counted
// with their TTFT, 429s (one slot, no queue, more clients) are counted but
// are not errors, and the target's goroutines and RSS come from /metrics.
func TestBenchLoadCountsResponsesAndReadsTheTargetsMetrics(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Queue, f.Ctx = 1, 0, 2048 })
	f := Options{Workload: DefaultWorkload(), Target: a.URL(), JSON: true, Settle: 5 * time.Second}
	f.Workload.Clients, f.Workload.Duration, f.Workload.MaxTokens, f.Workload.UserBytes, f.Workload.SystemBytes, f.Workload.Turns = 3, 2*time.Second, 8, 40, 100, 2
	var out bytes.Buffer
	if err := Bench(context.Background(), f, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out.Bytes())
	}
	switch {
	case res.ByStatus["200"] == 0:
		t.Fatalf("no completed stream: %+v", res)
	case res.ByStatus["429"] == 0:
		t.Fatalf("three clients on one slot without a queue got no 429: %+v", res)
	case res.ErrorsNot429 != 0:
		t.Fatalf("errors other than 429: %+v", res)
	case res.Requests != res.ByStatus["200"]+res.ByStatus["429"]:
		t.Fatalf("requests %d do not add up: %v", res.Requests, res.ByStatus)
	case res.TTFTP50 <= 0 || res.TTFTP99 < res.TTFTP50:
		t.Fatalf("TTFT p50 %v p99 %v", res.TTFTP50, res.TTFTP99)
	case res.GoroutinesBefore < 1 || res.GoroutinesAfter < 1 || res.RSSBefore <= 0 || res.RSSAfter <= 0:
		t.Fatalf("target stats not read: %+v", res)
	}
}

// kvwin bench load --tenants against a real server with keys: each
// tenant's requests are sent with its key and class, counted under it and
// under its class, with the tokens the server says it generated; --alone
// runs the tenant's load by itself first and compares its p99.
func TestBenchLoadTenantsAgainstARealServer(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("A=bench-test-key-A class=batch\nB=bench-test-key-B\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.APIKeyFile, f.Ctx = 2, keys, 2048 })
	f := Options{Workload: DefaultWorkload(), Target: a.URL(), JSON: true, Alone: []string{"B"}}
	f.Workload.UserBytes, f.Workload.SystemBytes = 40, 100
	f.Tenants = []Tenant{
		{Name: "A", Key: "bench-test-key-A", Class: queue.Batch, Mode: ModeBurst, Requests: 3, MaxTokens: 8},
		{Name: "B", Key: "bench-test-key-B", Mode: ModeSerial, Requests: 2, MaxTokens: 5},
	}
	var out bytes.Buffer
	if err := Bench(context.Background(), f, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var res MixResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out.Bytes())
	}
	if len(res.Runs) != 2 || res.Runs[0].Alone != "B" || res.Runs[1].Label != "target" {
		t.Fatalf("runs %+v: want B alone, then both", res.Runs)
	}
	alone, mixed := res.Runs[0], res.Runs[1]
	if len(alone.Tenants) != 1 || alone.Tenants[0].Completed != 2 || alone.Tenants[0].CompletedTokens != 10 {
		t.Errorf("B alone: %+v, want 2 completed of 5 tokens", alone.Tenants)
	}
	got := map[string]Group{}
	for _, g := range append(mixed.Tenants, mixed.Classes...) {
		got[g.Name] = g
	}
	for name, want := range map[string]struct {
		class             string
		completed, tokens int
	}{
		"A": {"batch", 3, 24}, "B": {"interactive", 2, 10}, "batch": {"", 3, 24}, "interactive": {"", 2, 10},
	} {
		g := got[name]
		if g.Class != want.class || g.Requests != want.completed || g.Completed != want.completed || g.CompletedTokens != want.tokens || g.TTFTP50 <= 0 || g.TTFTP99 < g.TTFTP50 {
			t.Errorf("%s: %+v, want class %q, %d requests completed, %d tokens", name, g, want.class, want.completed, want.tokens)
		}
	}
	if mixed.ErrorsNot429 != 0 || len(res.Alone) != 1 || res.Alone[0].Tenant != "B" || res.Alone[0].P99Alone != alone.Tenants[0].TTFTP99 {
		t.Errorf("errors %d, alone %+v", mixed.ErrorsNot429, res.Alone)
	}
}
