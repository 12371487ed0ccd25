// Package load is kvwin bench load: many streaming chat clients against
// one server for a while, counting responses by status and TTFT, and the
// server's goroutines and memory before and after.
package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/bench/node"
)

// Options are a bench load run: the workload, and the server it runs
// against.
type Options struct {
	Workload Workload
	// Target is the server's base URL; empty: start kvwin serve (this
	// executable, the test model) with Slots, Queue and Threads (0: its
	// default) on a free port.
	Target                string
	Slots, Queue, Threads int
	// Settle bounds the wait after the load for the target's goroutines to
	// come back to their level before it.
	Settle time.Duration
	// JSON: also print the result as JSON on standard output.
	JSON bool
	// Tenants, when set, make the run a mixed load (MixResult): each
	// tenant's load at once, against a server per queue order in Orders
	// (started ones only; default the server's own, fair), after the load
	// of each tenant named in Alone by itself.
	Tenants []Tenant
	Orders  []string
	Alone   []string
}

// Bench runs the load and reports it: a table on stderr, JSON on
// stdout with --json.
func Bench(ctx context.Context, f Options, stdout, stderr io.Writer) error {
	if f.Workload.Clients < 1 || f.Workload.Duration <= 0 || f.Workload.MaxTokens < 1 || f.Workload.Turns < 1 || f.Workload.UserBytes < 1 || f.Workload.SystemBytes < 0 {
		return errors.New("bench load: --clients, --duration, --max-tokens, --turns and --user-tokens must be positive")
	}
	if len(f.Tenants) > 0 {
		return benchMix(ctx, f, stdout, stderr)
	}
	if len(f.Orders) > 0 || len(f.Alone) > 0 {
		return errors.New("bench load: --queue-order and --alone go with --tenants")
	}
	target := f.Target
	if target == "" {
		p, err := startLoadTarget(ctx, f)
		if err != nil {
			return err
		}
		defer p.Stop()
		target = p.URL
	}
	gBefore, rssBefore, err := processStats(ctx, target)
	if err != nil {
		return fmt.Errorf("bench load: the target's /metrics: %w", err)
	}
	fmt.Fprintf(stderr, "load: %d clients × %v against %s\n", f.Workload.Clients, f.Workload.Duration, target)
	res := f.Workload.Run(ctx, target)
	res.GoroutinesBefore, res.RSSBefore = gBefore, rssBefore
	// Handlers of the last requests may still be returning: wait (bounded)
	// for the goroutines to come back to their level before the load.
	settle := time.Now().Add(f.Settle)
	for {
		g, rss, err := processStats(ctx, target)
		if err != nil {
			return fmt.Errorf("bench load: the target's /metrics after the load: %w", err)
		}
		res.GoroutinesAfter, res.RSSAfter = g, rss
		if g <= gBefore || time.Now().After(settle) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	printLoad(stderr, res)
	return writeJSON(f.JSON, stdout, res)
}

// startLoadTarget starts kvwin serve on the test model, as bench load's
// target when none is given, with extra flags.
func startLoadTarget(ctx context.Context, f Options, extra ...string) (*node.Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kvwin-bench-load")
	if err != nil {
		return nil, err
	}
	model, err := app.EnsureTinyModel(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"--model", model, "--data-dir", dir, "--slots", strconv.Itoa(f.Slots), "--queue", strconv.Itoa(f.Queue)}
	if f.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(f.Threads))
	}
	args = append(args, extra...)
	p, err := node.Start(ctx, exe, args)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.Cleanup = func() { os.RemoveAll(dir) }
	return p, nil
}

func printLoad(w io.Writer, r Result) {
	fmt.Fprintf(w, "requests %d in %.1fs (%.2f completed/s), errors other than 429: %d\n", r.Requests, r.DurationS, r.CompletedPerS, r.ErrorsNot429)
	fmt.Fprintf(w, "responses by status: %v\n", r.ByStatus)
	fmt.Fprintf(w, "TTFT p50 %.0f ms, p99 %.0f ms\n", r.TTFTP50, r.TTFTP99)
	fmt.Fprintf(w, "goroutines %.0f → %.0f, RSS %.1f → %.1f MiB\n", r.GoroutinesBefore, r.GoroutinesAfter, r.RSSBefore/(1<<20), r.RSSAfter/(1<<20))
	for _, e := range r.FirstErrors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
}

// writeJSON writes v to w as indented JSON when on (--json).
func writeJSON(on bool, w io.Writer, v any) error {
	if !on {
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
