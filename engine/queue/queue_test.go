package queue

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// req is a queued value: who sent it, and its number among its tenant's.
type req struct {
	tenant string
	n      int
}

func (r req) String() string { return fmt.Sprintf("%s%d", r.tenant, r.n) }

// push adds n requests of tenant under k.
func push(q *Queue[req], k Key, n int) {
	for i := range n {
		q.Push(req{k.Tenant, i}, k)
	}
}

// popAll pops while values go, offering spare slots as spare says.
func popAll(q *Queue[req], spare bool, limit int) []string {
	var out []string
	for len(out) < limit {
		v, ok := q.Pop(spare)
		if !ok {
			break
		}
		out = append(out, v.String())
	}
	return out
}

func TestClassOrder(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		spare bool
		want  string
	}{
		{"interactive first, then batch on a spare slot", Config{}, true, "i0 i1 b0 b1"},
		{"no spare slot: batch waits", Config{}, false, "i0 i1"},
		{"FIFO: arrival order", Config{FIFO: true}, false, "b0 i0 b1 i1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[req](tt.cfg)
			q.Push(req{"b", 0}, Key{Class: Batch, Tenant: "b", Cost: 10})
			q.Push(req{"i", 0}, Key{Class: Interactive, Tenant: "i", Cost: 10})
			q.Push(req{"b", 1}, Key{Class: Batch, Tenant: "b", Cost: 10})
			q.Push(req{"i", 1}, Key{Class: Interactive, Tenant: "i", Cost: 10})
			if got := strings.Join(popAll(q, tt.spare, 10), " "); got != tt.want {
				t.Errorf("order %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStarvationBound: while batch waits, at most BatchEvery interactive
// requests go before one batch request, even with no spare slot.
func TestStarvationBound(t *testing.T) {
	for _, every := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(every), func(t *testing.T) {
			q := New[req](Config{BatchEvery: every})
			push(q, Key{Class: Batch, Tenant: "b", Cost: 10}, 3)
			push(q, Key{Class: Interactive, Tenant: "i", Cost: 10}, 3*every+2)
			got := popAll(q, false, 100)
			run := 0
			batches := 0
			for _, v := range got {
				if v[0] == 'b' {
					if run != every {
						t.Fatalf("a batch request after %d interactive ones, want %d: %v", run, every, got)
					}
					run = 0
					batches++
					continue
				}
				run++
			}
			if batches != 3 || len(got) != 3*every+2+3 {
				t.Errorf("popped %v: want every request, 3 of them batch", got)
			}
		})
	}
}

// served pops n values and sums the cost each tenant was served.
func served(q *Queue[req], costs map[string]int, n int) map[string]int {
	out := map[string]int{}
	for range n {
		v, ok := q.Pop(true)
		if !ok {
			break
		}
		out[v.tenant] += costs[v.tenant]
	}
	return out
}

// TestDRRProportions: over a backlog the tokens served are in proportion
// to the weights, whatever the request sizes and whichever tenant arrived
// first, within deficit round-robin's bound: a flow is at most one round's
// credit (quantum × weight) and one request ahead of its share at any cut.
func TestDRRProportions(t *testing.T) {
	tests := []struct {
		name    string
		quantum int
		costs   map[string]int
		weights map[string]float64
		pops    int
	}{
		{"equal weights, equal costs", 0, map[string]int{"a": 100, "b": 100}, map[string]float64{"a": 1, "b": 1}, 2000},
		{"equal weights, tokens not requests", 0, map[string]int{"a": 1000, "b": 100}, map[string]float64{"a": 1, "b": 1}, 1100},
		{"weights 1:3", 0, map[string]int{"a": 100, "b": 100}, map[string]float64{"a": 1, "b": 3}, 2000},
		{"weights 2:1:1, mixed costs", 0, map[string]int{"a": 300, "b": 70, "c": 1500}, map[string]float64{"a": 2, "b": 1, "c": 1}, 1500},
		{"costs far above the quantum", 1, map[string]int{"a": 5000, "b": 20000}, map[string]float64{"a": 1, "b": 1}, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[req](Config{Quantum: tt.quantum})
			// Interleave arrivals so FIFO would serve by request count;
			// the map's order varies run to run, so does who comes first.
			for i := range 2000 {
				for tenant, cost := range tt.costs {
					q.Push(req{tenant, i}, Key{Tenant: tenant, Weight: tt.weights[tenant], Cost: cost})
				}
			}
			quantum := tt.quantum
			if quantum == 0 {
				quantum = DefaultQuantum
			}
			got := served(q, tt.costs, tt.pops)
			var total, weights float64
			maxCost, maxWeight := 0, 0.0
			for tenant := range tt.costs {
				total += float64(got[tenant])
				weights += tt.weights[tenant]
				maxCost = max(maxCost, tt.costs[tenant])
				maxWeight = max(maxWeight, tt.weights[tenant])
			}
			bound := float64(quantum)*maxWeight + float64(maxCost)
			for tenant, w := range tt.weights {
				want := total * w / weights
				if math.Abs(float64(got[tenant])-want) > bound {
					t.Errorf("tenant %s served %d tokens, want %.0f ± %.0f (served %v)", tenant, got[tenant], want, bound, got)
				}
			}
		})
	}
}

// TestTenantOrderAndRemove: a tenant's requests keep their order; Remove
// takes exactly what it is told and the rest keep their places.
func TestTenantOrderAndRemove(t *testing.T) {
	q := New[req](Config{})
	push(q, Key{Tenant: "a", Cost: 10}, 4)
	push(q, Key{Tenant: "b", Cost: 10}, 2)
	gone := q.Remove(func(r req) bool { return r.tenant == "b" || r.n == 1 })
	if len(gone) != 3 || q.Len() != 3 {
		t.Fatalf("removed %v, %d left: want 3 removed, 3 left", gone, q.Len())
	}
	if got := strings.Join(popAll(q, true, 10), " "); got != "a0 a2 a3" {
		t.Errorf("after remove: %q, want \"a0 a2 a3\"", got)
	}
	if _, ok := q.Pop(true); ok || q.Len() != 0 {
		t.Errorf("an empty queue popped a value (len %d)", q.Len())
	}
}

// TestStreakClearsWithBatch: the starvation bound counts only while batch
// waits; interactive requests taken with no batch waiting do not make a
// later batch request jump ahead.
func TestStreakClearsWithBatch(t *testing.T) {
	q := New[req](Config{BatchEvery: 2})
	push(q, Key{Tenant: "i", Cost: 10}, 5)
	popAll(q, false, 5)
	push(q, Key{Class: Batch, Tenant: "b", Cost: 10}, 1)
	push(q, Key{Tenant: "j", Cost: 10}, 3)
	if got := strings.Join(popAll(q, false, 10), " "); got != "j0 j1 b0 j2" {
		t.Errorf("order %q, want \"j0 j1 b0 j2\"", got)
	}
}

func TestParseClass(t *testing.T) {
	tests := []struct {
		in      string
		want    Class
		wantErr bool
	}{
		{"interactive", Interactive, false},
		{" Batch ", Batch, false},
		{"BATCH", Batch, false},
		{"", 0, true},
		{"realtime", 0, true},
		{"batch\r\nX-Evil: 1", 0, true},
		{strings.Repeat("x", 10000), 0, true},
	}
	for _, tt := range tests {
		got, err := ParseClass(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseClass(%.20q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("ParseClass(%.20q): error of %d bytes, want it bounded", tt.in, len(err.Error()))
		}
	}
	if Within(Batch, Interactive) != Batch || Within(Interactive, Batch) != Batch || Within(Interactive, Interactive) != Interactive {
		t.Error("Within: a request may lower its key's class, never raise it")
	}
}

// TestPopInteractiveKeepsTheReservedSlot: PopInteractive never takes a
// batch request, even with the starvation bound due, and counts toward
// the bound as an interactive pop while batch waits; the next Pop(false)
// after that is batch (the bound, once no batch request runs).
func TestPopInteractiveKeepsTheReservedSlot(t *testing.T) {
	q := New[req](Config{BatchEvery: 2})
	push(q, Key{Class: Batch, Tenant: "b", Cost: 10}, 1)
	push(q, Key{Class: Interactive, Tenant: "i", Cost: 10}, 4)
	var got []string
	for range 3 {
		v, ok := q.PopInteractive()
		if !ok {
			t.Fatal("an interactive request waits, none popped")
		}
		got = append(got, fmt.Sprintf("%s%d", v.tenant, v.n))
	}
	if want := "i0 i1 i2"; strings.Join(got, " ") != want {
		t.Fatalf("popped %v, want %s (never the due batch request)", got, want)
	}
	if v, ok := q.Pop(false); !ok || v.tenant != "b" {
		t.Fatalf("Pop(false) with the bound due = %v %v, want the batch request", v, ok)
	}
	if _, ok := q.PopInteractive(); !ok {
		t.Fatal("the last interactive request not popped")
	}
	if _, ok := q.PopInteractive(); ok || q.Len() != 0 {
		t.Fatalf("popped from an empty queue (len %d)", q.Len())
	}
}

// TestFIFOIgnoresTheReservedSlot: with FIFO, PopInteractive takes the
// next value in arrival order, batch or not, as Pop does.
func TestFIFOIgnoresTheReservedSlot(t *testing.T) {
	q := New[req](Config{FIFO: true})
	q.Push(req{"b", 0}, Key{Class: Batch, Tenant: "b", Cost: 10})
	q.Push(req{"i", 0}, Key{Class: Interactive, Tenant: "i", Cost: 10})
	for _, want := range []string{"b", "i"} {
		if v, ok := q.PopInteractive(); !ok || v.tenant != want {
			t.Fatalf("PopInteractive = %v %v, want %s (arrival order)", v, ok, want)
		}
	}
}
