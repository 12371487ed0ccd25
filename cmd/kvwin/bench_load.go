package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/load"
)

func newBenchLoadCmd() *cobra.Command {
	f := load.Options{Workload: load.DefaultWorkload()}
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
			return load.Bench(cmd.Context(), f, cmd.OutOrStdout(), os.Stderr)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.Workload.Clients, "clients", f.Workload.Clients, "concurrent streaming clients")
	fl.DurationVar(&f.Workload.Duration, "duration", f.Workload.Duration, "how long clients keep sending")
	fl.StringVar(&f.Target, "target", "", "server base URL (default: start kvwin serve on a free port)")
	fl.BoolVar(&f.JSON, "json", false, "print JSON on standard output")
	fl.IntVar(&f.Workload.MaxTokens, "max-tokens", f.Workload.MaxTokens, "tokens per answer")
	fl.IntVar(&f.Workload.UserBytes, "user-tokens", f.Workload.UserBytes, "user message length (the test model: a token per byte)")
	fl.IntVar(&f.Workload.SystemBytes, "system-tokens", f.Workload.SystemBytes, "system prompt length")
	fl.IntVar(&f.Workload.Turns, "turns", f.Workload.Turns, "turns per conversation before a client starts a new one")
	fl.IntVar(&f.Slots, "slots", 4, "without --target: the started server's --slots")
	fl.IntVar(&f.Queue, "queue", 64, "without --target: the started server's --queue")
	fl.IntVar(&f.Threads, "threads", 0, "without --target: the started server's --threads (default: its own)")
	fl.DurationVar(&f.Settle, "settle", 10*time.Second, "after the load, how long to wait for the target's goroutines to return to their level before it")
	return cmd
}
