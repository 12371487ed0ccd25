package main

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/ttft"
)

func newBenchTTFTCmd() *cobra.Command {
	f := ttft.Options{Gen: ttft.DefaultGeneratorConfig()}
	cmd := &cobra.Command{
		Use:   "ttft",
		Short: "TTFT against conversation length, per window policy, in one run",
		Long: `Replays one long conversation turn by turn under each policy (full-nocache,
full, sliding, sink, memory) and measures the time to first token as the history
grows. Each request carries the whole history so far, with the workload's own
assistant messages, so every policy sees identical histories.

By default every policy gets a fresh in-process server on the test model (one
slot, a context that holds the whole conversation), so policies do not disturb
each other. With --target the policies run against that server one after the
other; it cannot be restarted, so each policy's system prompt starts with a
token of its own and no policy reuses another's cache.

Writes ttft.csv, ttft.json and ttft.svg into --out and prints a summary table
to standard error; with --json standard output holds only ttft.json's document.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return ttft.Bench(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Target, "target", "", "base URL of a running kvwin to measure (default: a fresh in-process server per policy)")
	fl.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to this file (the in-process servers included)")
	// One core is left to the harness and the HTTP path, which run in this same
	// process: ggml threads spin-wait, and sharing every core with them makes
	// prompt times jump several-fold at random.
	fl.IntVar(&f.Threads, "threads", max(1, runtime.NumCPU()-1), "compute threads of the in-process server (default: all cores but one)")
	fl.IntVar(&f.Turns, "turns", 120, "turns to replay")
	fl.StringSliceVar(&f.Policies, "policies", policyNames(ttft.Policies()), "policies to compare, in order")
	fl.IntVar(&f.Budget, "budget", 2048, "window budget in tokens of sliding, sink and memory")
	fl.IntVar(&f.Sample, "sample", 4, "measure full-nocache only every k-th turn (and the last)")
	fl.StringVar(&f.Workload, "workload", "builtin", "builtin, locomo or sharegpt (the last two read --data)")
	fl.StringVar(&f.Data, "data", "", "workload file of --workload locomo or sharegpt")
	fl.Uint64Var(&f.Gen.Seed, "seed", f.Gen.Seed, "seed of the builtin workload")
	fl.IntVar(&f.Gen.SystemTokens, "system-tokens", f.Gen.SystemTokens, "builtin workload: system prompt tokens")
	fl.IntVar(&f.Gen.UserMin, "user-min", f.Gen.UserMin, "builtin workload: shortest user message, tokens")
	fl.IntVar(&f.Gen.UserMax, "user-max", f.Gen.UserMax, "builtin workload: longest user message, tokens")
	fl.IntVar(&f.Gen.AssistantMin, "assistant-min", f.Gen.AssistantMin, "builtin workload: shortest assistant message, tokens")
	fl.IntVar(&f.Gen.AssistantMax, "assistant-max", f.Gen.AssistantMax, "builtin workload: longest assistant message, tokens")
	fl.Float64Var(&f.BytesPerToken, "bytes-per-token", 1, "with --target: text bytes per token of its model, for the builtin workload's lengths and the history count (1: the test model's byte-level vocabulary)")
	fl.IntVar(&f.MaxTokens, "max-tokens", 8, "tokens generated per turn")
	fl.StringVar(&f.Out, "out", "./out/ttft", "directory for ttft.csv, ttft.json and ttft.svg")
	fl.StringVar(&f.API, "api", ttft.APIChat, "chat, or responses: replay each policy through the Responses API (only new input each turn) and beside it through chat completions with the same replies")
	fl.BoolVar(&f.JSON, "json", false, "print ttft.json's document on standard output")
	fl.BoolVar(&f.Verbose, "verbose", false, "show the in-process servers' logs (every request) on standard error")
	return cmd
}

func policyNames(ps []ttft.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}
