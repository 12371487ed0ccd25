package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// benchLoadFlags are kvwin bench load's flags.
type benchLoadFlags struct {
	w       loadWorkload
	target  string
	asJSON  bool
	slots   int
	queue   int
	threads int
	settle  time.Duration
}

func newBenchLoadCmd() *cobra.Command {
	f := benchLoadFlags{w: defaultLoadWorkload()}
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Many streaming clients against one server: TTFT, responses by status, goroutines and RSS before and after",
		Long: `Runs --clients streaming chat clients on loopback against --target for
--duration. Each client holds a conversation of a few turns and sends its
next turn as soon as the last one ended (a 429 is waited out, per
Retry-After, at most a second). Reports TTFT p50/p99 of the completed
streams, responses by status (stream_error: a 200 whose stream ended with an
error or was cut; transport_error: no response), the errors other than 429,
and the target's goroutines and resident memory from its /metrics before the
load and after it (once in-flight work settled, at most --settle).

Without --target, a kvwin serve (the test model, --slots, --queue, --threads)
is started as a subprocess on a free port, so its numbers are its own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchLoad(cmd.Context(), f, cmd.OutOrStdout(), os.Stderr)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.w.Clients, "clients", f.w.Clients, "concurrent streaming clients")
	fl.DurationVar(&f.w.Duration, "duration", f.w.Duration, "how long clients keep sending")
	fl.StringVar(&f.target, "target", "", "server base URL (default: start kvwin serve on a free port)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON on standard output")
	fl.IntVar(&f.w.MaxTokens, "max-tokens", f.w.MaxTokens, "tokens per answer")
	fl.IntVar(&f.w.UserBytes, "user-tokens", f.w.UserBytes, "user message length (the test model: a token per byte)")
	fl.IntVar(&f.w.SystemBytes, "system-tokens", f.w.SystemBytes, "system prompt length")
	fl.IntVar(&f.w.Turns, "turns", f.w.Turns, "turns per conversation before a client starts a new one")
	fl.IntVar(&f.slots, "slots", 4, "without --target: the started server's --slots")
	fl.IntVar(&f.queue, "queue", 64, "without --target: the started server's --queue")
	fl.IntVar(&f.threads, "threads", 0, "without --target: the started server's --threads (default: its own)")
	fl.DurationVar(&f.settle, "settle", 10*time.Second, "after the load, how long to wait for the target's goroutines to return to their level before it")
	return cmd
}

// benchLoad runs the load and reports it: a table on stderr, JSON on
// stdout with --json.
func benchLoad(ctx context.Context, f benchLoadFlags, stdout, stderr io.Writer) error {
	if f.w.Clients < 1 || f.w.Duration <= 0 || f.w.MaxTokens < 1 || f.w.Turns < 1 || f.w.UserBytes < 1 || f.w.SystemBytes < 0 {
		return errors.New("bench load: --clients, --duration, --max-tokens, --turns and --user-tokens must be positive")
	}
	target := f.target
	if target == "" {
		node, err := startLoadTarget(ctx, f)
		if err != nil {
			return err
		}
		defer node.stop()
		target = node.url
	}
	gBefore, rssBefore, err := processStats(ctx, target)
	if err != nil {
		return fmt.Errorf("bench load: the target's /metrics: %w", err)
	}
	fmt.Fprintf(stderr, "load: %d clients × %v against %s\n", f.w.Clients, f.w.Duration, target)
	res := f.w.run(ctx, target)
	res.GoroutinesBefore, res.RSSBefore = gBefore, rssBefore
	// Handlers of the last requests may still be returning: wait (bounded)
	// for the goroutines to come back to their level before the load.
	settle := time.Now().Add(f.settle)
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
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return nil
}

// startLoadTarget starts kvwin serve on the test model, as bench load's
// target when none is given.
func startLoadTarget(ctx context.Context, f benchLoadFlags) (*nodeProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kvwin-bench-load")
	if err != nil {
		return nil, err
	}
	model, err := ensureTinyModel(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"--model", model, "--data-dir", dir, "--slots", strconv.Itoa(f.slots), "--queue", strconv.Itoa(f.queue)}
	if f.threads > 0 {
		args = append(args, "--threads", strconv.Itoa(f.threads))
	}
	node, err := startServeProcess(ctx, exe, args)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	node.cleanup = func() { os.RemoveAll(dir) }
	return node, nil
}

func printLoad(w io.Writer, r loadResult) {
	fmt.Fprintf(w, "requests %d in %.1fs (%.2f completed/s), errors other than 429: %d\n", r.Requests, r.DurationS, r.CompletedPerS, r.ErrorsNot429)
	fmt.Fprintf(w, "responses by status: %v\n", r.ByStatus)
	fmt.Fprintf(w, "TTFT p50 %.0f ms, p99 %.0f ms\n", r.TTFTP50, r.TTFTP99)
	fmt.Fprintf(w, "goroutines %.0f → %.0f, RSS %.1f → %.1f MiB\n", r.GoroutinesBefore, r.GoroutinesAfter, r.RSSBefore/(1<<20), r.RSSAfter/(1<<20))
	for _, e := range r.FirstErrors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
}
