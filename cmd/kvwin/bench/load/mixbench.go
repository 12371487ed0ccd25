package load

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
)

// MixResult is a mixed load (--tenants): its runs side by side, and the
// figures taken between them.
type MixResult struct {
	Runs []MixRun `json:"runs"`
	// Alone compares each --alone tenant's TTFT p99 in every mixed run
	// with its p99 alone.
	Alone []AloneRatio `json:"alone,omitempty"`
	// Shares compares the completed tokens of the flood tenants of equal
	// weight, per class and run.
	Shares []Share `json:"shares,omitempty"`
}

// MixRun is one run of tenants against one server.
type MixRun struct {
	// Label is the queue order ("target" against --target), or "alone
	// NAME (ORDER)" for a tenant's load by itself.
	Label string `json:"label"`
	// Alone names the tenant of a run of one tenant's load by itself.
	Alone string `json:"alone,omitempty"`
	// QueueOrder is the started server's --queue-order ("" against
	// --target).
	QueueOrder   string   `json:"queue_order,omitempty"`
	Target       string   `json:"target"`
	DurationS    float64  `json:"duration_s"`
	ErrorsNot429 int      `json:"errors_not_429"`
	Tenants      []Group  `json:"tenants"`
	Classes      []Group  `json:"classes"`
	FirstErrors  []string `json:"first_errors,omitempty"`
}

// AloneRatio is a tenant's TTFT p99 in a mixed run over its p99 alone.
type AloneRatio struct {
	Tenant   string  `json:"tenant"`
	Run      string  `json:"run"`
	P99Alone float64 `json:"ttft_p99_alone_ms"`
	P99      float64 `json:"ttft_p99_ms"`
	Ratio    float64 `json:"ratio"`
}

// Share is the spread of the completed tokens of a run's flood tenants of
// one class and equal weight: (most - least) / most.
type Share struct {
	Run     string         `json:"run"`
	Class   string         `json:"class"`
	Weight  float64        `json:"weight"`
	Tokens  map[string]int `json:"completed_tokens"`
	Spread  float64        `json:"spread"`
	tenants []string
}

// benchMix runs f.Tenants against each queue order (a server of its own
// per order, or f.Target): first each --alone tenant's load by itself,
// then all of them, so each alone figure is taken beside the mixed one it
// is compared with (the machine's load drifts).
func benchMix(ctx context.Context, f Options, stdout, stderr io.Writer) error {
	orders := f.Orders
	if f.Target != "" && len(orders) > 0 {
		return fmt.Errorf("bench load: --queue-order is the started server's; with --target the target's own order is measured")
	}
	if f.Target != "" {
		orders = []string{""}
	} else if len(orders) == 0 {
		orders = []string{"fair"}
	}
	tenants := slices.Clone(f.Tenants)
	for i := range tenants {
		if tenants[i].Key == "" && f.Target == "" {
			tenants[i].Key = "bench-load-" + tenants[i].Name + "-key"
		}
	}
	var alone []int
	for _, name := range f.Alone {
		i := slices.IndexFunc(tenants, func(t Tenant) bool { return t.Name == name })
		if i < 0 {
			return fmt.Errorf("bench load: --alone %s names no --tenants", name)
		}
		alone = append(alone, i)
	}
	var res MixResult
	for _, order := range orders {
		runs, err := orderRuns(ctx, f, order, tenants, alone, stderr)
		res.Runs = append(res.Runs, runs...)
		if err != nil {
			return err
		}
	}
	res.Alone, res.Shares = compareRuns(tenants, res.Runs)
	printMix(stderr, res)
	return writeJSON(f.JSON, stdout, res)
}

// aloneSeeds numbers the conversations of the alone runs apart from the
// mixed run's, so the mixed run finds none of its prompts cached.
const aloneSeeds = 1 << 24

// orderRuns runs, against f.Target or a server started with order and the
// tenants' keys, each alone tenant's load by itself, then every tenant's.
func orderRuns(ctx context.Context, f Options, order string, tenants []Tenant, alone []int, stderr io.Writer) ([]MixRun, error) {
	target := f.Target
	if target == "" {
		var extra []string
		if order != "" {
			extra = append(extra, "--queue-order", order)
		}
		for _, t := range tenants {
			extra = append(extra, "--api-key", t.keySpec())
		}
		p, err := startLoadTarget(ctx, f, extra...)
		if err != nil {
			return nil, err
		}
		defer p.Stop()
		target = p.URL
		// A fresh server's first request pays for warming up: pay it here,
		// not in the first figure.
		warm := tenants[0]
		warm.Mode, warm.Requests = ModeSerial, 1
		f.Workload.runMix(ctx, target, []Tenant{warm}, 2*aloneSeeds)
	}
	label := order
	if label == "" {
		label = "target"
	}
	var runs []MixRun
	for _, i := range alone {
		run := mixRun(ctx, f.Workload, target, tenants[i:i+1], aloneSeeds, stderr)
		run.Label, run.QueueOrder, run.Alone = "alone "+tenants[i].Name+" ("+label+")", order, tenants[i].Name
		runs = append(runs, run)
	}
	run := mixRun(ctx, f.Workload, target, tenants, 0, stderr)
	run.Label, run.QueueOrder = label, order
	return append(runs, run), ctx.Err()
}

// mixRun runs tenants against target and sums their requests.
func mixRun(ctx context.Context, w Workload, target string, tenants []Tenant, seeds int, stderr io.Writer) MixRun {
	fmt.Fprintf(stderr, "load: %d tenants against %s\n", len(tenants), target)
	outcomes, wall := w.runMix(ctx, target, tenants, seeds)
	run := MixRun{Target: target, DurationS: wall.Seconds()}
	run.Tenants, run.Classes = summarizeGroups(tenants, outcomes)
	for _, o := range outcomes {
		if o.outcome != "200" && o.outcome != "429" {
			noteError(&run.ErrorsNot429, &run.FirstErrors, tenants[o.tenant].Name+": "+o.outcome+": "+o.err)
		}
	}
	return run
}

// compareRuns takes the figures between runs: each alone tenant's p99 in
// a mixed run over its p99 alone on the same server, and the token spread
// of the flood tenants of equal weight within a class.
func compareRuns(tenants []Tenant, runs []MixRun) ([]AloneRatio, []Share) {
	var ratios []AloneRatio
	var shares []Share
	alone := map[string]float64{} // tenant → p99 alone, on this run's server
	for _, r := range runs {
		if r.Alone != "" {
			alone[r.Alone] = r.Tenants[0].TTFTP99
			continue
		}
		groups := map[string]*Share{}
		var keys []string
		for i, g := range r.Tenants {
			if p, ok := alone[g.Name]; ok {
				ratios = append(ratios, AloneRatio{Tenant: g.Name, Run: r.Label, P99Alone: p, P99: g.TTFTP99, Ratio: ratioOf(g.TTFTP99, p)})
			}
			t := tenants[i]
			if t.Mode != ModeFlood {
				continue
			}
			w := t.Weight
			if w == 0 {
				w = 1 // the server's default
			}
			key := fmt.Sprint(t.Class, "/", w)
			if groups[key] == nil {
				groups[key] = &Share{Run: r.Label, Class: t.Class.String(), Weight: w, Tokens: map[string]int{}}
				keys = append(keys, key)
			}
			groups[key].Tokens[g.Name] = g.CompletedTokens
			groups[key].tenants = append(groups[key].tenants, g.Name)
		}
		for _, k := range keys {
			s := groups[k]
			if len(s.Tokens) < 2 {
				continue
			}
			lo, hi := math.MaxInt, 0
			for _, n := range s.Tokens {
				lo, hi = min(lo, n), max(hi, n)
			}
			s.Spread = ratioOf(float64(hi-lo), float64(hi))
			shares = append(shares, *s)
		}
		clear(alone)
	}
	return ratios, shares
}

// ratioOf is a/b, 0 when b is 0 (JSON holds no NaN).
func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func printMix(w io.Writer, r MixResult) {
	for _, run := range r.Runs {
		fmt.Fprintf(w, "\nrun %s: %.1fs, errors other than 429: %d\n", run.Label, run.DurationS, run.ErrorsNot429)
		fmt.Fprintf(w, "  %-14s %-12s %8s %9s %10s %10s %10s\n", "tenant/class", "class", "requests", "completed", "tokens", "TTFT p50", "TTFT p99")
		for _, g := range append(slices.Clone(run.Tenants), run.Classes...) {
			class := g.Class
			if class == "" {
				class = "(all)"
			}
			fmt.Fprintf(w, "  %-14s %-12s %8d %9d %10d %8.0fms %8.0fms\n", g.Name, class, g.Requests, g.Completed, g.CompletedTokens, g.TTFTP50, g.TTFTP99)
		}
		for _, e := range run.FirstErrors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
	if len(r.Alone) > 0 || len(r.Shares) > 0 {
		fmt.Fprintln(w)
	}
	for _, a := range r.Alone {
		fmt.Fprintf(w, "%s's TTFT p99 under %s: %.0f ms, %.2f× its %.0f ms alone\n", a.Tenant, a.Run, a.P99, a.Ratio, a.P99Alone)
	}
	for _, s := range r.Shares {
		fmt.Fprintf(w, "%s, %s flood tenants of weight %g: completed tokens", s.Run, s.Class, s.Weight)
		for _, t := range s.tenants {
			fmt.Fprintf(w, " %s %d", t, s.Tokens[t])
		}
		fmt.Fprintf(w, ", spread %.1f%% of the most\n", 100*s.Spread)
	}
}
