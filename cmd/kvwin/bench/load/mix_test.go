package load

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"kvwin/engine/queue"
)

// TestSummarizeGroups: a mixed load's requests are summed per tenant and
// per class: requests, completed streams, their tokens, statuses, and
// TTFT quantiles over the completed streams only.
func TestSummarizeGroups(t *testing.T) {
	tenants := []Tenant{
		{Name: "A", Class: queue.Batch},
		{Name: "B", Class: queue.Interactive},
		{Name: "C", Class: queue.Interactive},
	}
	ok := func(tenant int, ttftMS, tokens int) tenantOutcome {
		return tenantOutcome{loadOutcome{outcome: "200", ttft: time.Duration(ttftMS) * time.Millisecond, tokens: tokens}, tenant}
	}
	outcomes := []tenantOutcome{
		ok(0, 100, 64), ok(0, 300, 64), ok(0, 200, 64),
		{loadOutcome{outcome: "429", err: "later"}, 0},
		ok(1, 10, 32), ok(1, 30, 32),
		{loadOutcome{outcome: outcomeStreamError, ttft: time.Second, tokens: 5}, 1},
		ok(2, 20, 30),
	}
	byTenant, byClass := summarizeGroups(tenants, outcomes)
	want := []Group{
		{Name: "A", Class: "batch", Requests: 4, Completed: 3, CompletedTokens: 192, ByStatus: map[string]int{"200": 3, "429": 1}, TTFTP50: 200, TTFTP99: 298},
		{Name: "B", Class: "interactive", Requests: 3, Completed: 2, CompletedTokens: 64, ByStatus: map[string]int{"200": 2, outcomeStreamError: 1}, TTFTP50: 20, TTFTP99: 29.8},
		{Name: "C", Class: "interactive", Requests: 1, Completed: 1, CompletedTokens: 30, ByStatus: map[string]int{"200": 1}, TTFTP50: 20, TTFTP99: 20},
	}
	if !reflect.DeepEqual(byTenant, want) {
		t.Errorf("by tenant:\n got %+v\nwant %+v", byTenant, want)
	}
	wantClass := []Group{
		{Name: "interactive", Requests: 4, Completed: 3, CompletedTokens: 94, ByStatus: map[string]int{"200": 3, outcomeStreamError: 1}, TTFTP50: 20, TTFTP99: 29.8},
		{Name: "batch", Requests: 4, Completed: 3, CompletedTokens: 192, ByStatus: map[string]int{"200": 3, "429": 1}, TTFTP50: 200, TTFTP99: 298},
	}
	if !reflect.DeepEqual(byClass, wantClass) {
		t.Errorf("by class:\n got %+v\nwant %+v", byClass, wantClass)
	}
}

// TestCompareRuns: an alone tenant's p99 in each mixed run is compared
// with its p99 alone on the same server (not another order's), and flood
// tenants of one class and weight (0 counting as 1) with each other.
func TestCompareRuns(t *testing.T) {
	tenants := []Tenant{
		{Name: "A", Mode: ModeFlood, Class: queue.Interactive},
		{Name: "B", Mode: ModeFlood, Class: queue.Interactive, Weight: 1},
		{Name: "C", Mode: ModeSerial, Class: queue.Interactive},
	}
	runs := []MixRun{
		{Label: "alone C (fair)", Alone: "C", Tenants: []Group{{Name: "C", TTFTP99: 100}}},
		{Label: "fair", Tenants: []Group{{Name: "A", CompletedTokens: 1000}, {Name: "B", CompletedTokens: 950}, {Name: "C", TTFTP99: 150}}},
		{Label: "alone C (fifo)", Alone: "C", Tenants: []Group{{Name: "C", TTFTP99: 200}}},
		{Label: "fifo", Tenants: []Group{{Name: "A", CompletedTokens: 400}, {Name: "B", CompletedTokens: 1600}, {Name: "C", TTFTP99: 3000}}},
	}
	ratios, shares := compareRuns(tenants, runs)
	wantRatios := []AloneRatio{
		{Tenant: "C", Run: "fair", P99Alone: 100, P99: 150, Ratio: 1.5},
		{Tenant: "C", Run: "fifo", P99Alone: 200, P99: 3000, Ratio: 15},
	}
	if !reflect.DeepEqual(ratios, wantRatios) {
		t.Errorf("ratios %+v, want %+v", ratios, wantRatios)
	}
	if len(shares) != 2 {
		t.Fatalf("shares %+v: want one per mixed run", shares)
	}
	for i, want := range []struct {
		run    string
		spread float64
	}{{"fair", 0.05}, {"fifo", 0.75}} {
		s := shares[i]
		if s.Run != want.run || s.Class != "interactive" || s.Weight != 1 || s.Spread != want.spread || len(s.Tokens) != 2 {
			t.Errorf("share %d: %+v, want run %s, spread %v over A and B", i, s, want.run, want.spread)
		}
	}
}

func TestParseTenant(t *testing.T) {
	def := Tenant{MaxTokens: 32}
	tests := []struct {
		in   string
		want Tenant
		err  string
	}{
		{"A:mode=burst,requests=64,class=batch,max-tokens=64", Tenant{Name: "A", Class: queue.Batch, Mode: ModeBurst, Requests: 64, MaxTokens: 64}, ""},
		{"B:mode=serial,requests=16", Tenant{Name: "B", Mode: ModeSerial, Requests: 16, MaxTokens: 32}, ""},
		{"X:clients=8,weight=2,key=sk-x", Tenant{Name: "X", Key: "sk-x", Mode: ModeFlood, Clients: 8, Weight: 2, MaxTokens: 32}, ""},
		{"X", Tenant{}, "needs clients=N"},
		{"X:mode=burst", Tenant{}, "needs clients=N"},
		{"X:clients=1,mode=trickle", Tenant{}, "mode \"trickle\""},
		{"X:clients=1,class=urgent", Tenant{}, "class="},
		{"X:clients=1,weight=1000", Tenant{}, "weight="},
		{"X:clients=1,colour=red", Tenant{}, "unknown option"},
		{"bad name:clients=1", Tenant{}, "tenant name"},
	}
	for _, tt := range tests {
		got, err := ParseTenant(tt.in, def)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseTenant(%q): error %v, want one saying %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseTenant(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	if got := (Tenant{Name: "A", Key: "k", Class: queue.Batch, Weight: 2.5}).keySpec(); got != "A=k class=batch weight=2.5" {
		t.Errorf("keySpec %q", got)
	}
}
