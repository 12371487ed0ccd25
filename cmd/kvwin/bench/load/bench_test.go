package load

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"os"
	"testing"
	"time"
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
