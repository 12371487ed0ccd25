package main

import (
	"context"
	"fmt"
	"io"
	"kvwin/cmd/kvwin/app"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/ttft"
)

// benchTTFTFlags are kvwin bench ttft's flags.
type benchTTFTFlags struct {
	target        string
	threads       int
	turns         int
	policies      []string
	budget        int
	sample        int
	workload      string
	data          string
	gen           ttft.GeneratorConfig
	bytesPerToken float64
	maxTokens     int
	out           string
	asJSON        bool
	verbose       bool
}

func newBenchTTFTCmd() *cobra.Command {
	f := benchTTFTFlags{gen: ttft.DefaultGeneratorConfig()}
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
			return benchTTFT(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.target, "target", "", "base URL of a running kvwin to measure (default: a fresh in-process server per policy)")
	// One core is left to the harness and the HTTP path, which run in this same
	// process: ggml threads spin-wait, and sharing every core with them makes
	// prompt times jump several-fold at random.
	fl.IntVar(&f.threads, "threads", max(1, runtime.NumCPU()-1), "compute threads of the in-process server (default: all cores but one)")
	fl.IntVar(&f.turns, "turns", 120, "turns to replay")
	fl.StringSliceVar(&f.policies, "policies", policyNames(ttft.Policies()), "policies to compare, in order")
	fl.IntVar(&f.budget, "budget", 2048, "window budget in tokens of sliding, sink and memory")
	fl.IntVar(&f.sample, "sample", 4, "measure full-nocache only every k-th turn (and the last)")
	fl.StringVar(&f.workload, "workload", "builtin", "builtin, locomo or sharegpt (the last two read --data)")
	fl.StringVar(&f.data, "data", "", "workload file of --workload locomo or sharegpt")
	fl.Uint64Var(&f.gen.Seed, "seed", f.gen.Seed, "seed of the builtin workload")
	fl.IntVar(&f.gen.SystemTokens, "system-tokens", f.gen.SystemTokens, "builtin workload: system prompt tokens")
	fl.IntVar(&f.gen.UserMin, "user-min", f.gen.UserMin, "builtin workload: shortest user message, tokens")
	fl.IntVar(&f.gen.UserMax, "user-max", f.gen.UserMax, "builtin workload: longest user message, tokens")
	fl.IntVar(&f.gen.AssistantMin, "assistant-min", f.gen.AssistantMin, "builtin workload: shortest assistant message, tokens")
	fl.IntVar(&f.gen.AssistantMax, "assistant-max", f.gen.AssistantMax, "builtin workload: longest assistant message, tokens")
	fl.Float64Var(&f.bytesPerToken, "bytes-per-token", 1, "with --target: text bytes per token of its model, for the builtin workload's lengths and the history count (1: the test model's byte-level vocabulary)")
	fl.IntVar(&f.maxTokens, "max-tokens", 8, "tokens generated per turn")
	fl.StringVar(&f.out, "out", "./out/ttft", "directory for ttft.csv, ttft.json and ttft.svg")
	fl.BoolVar(&f.asJSON, "json", false, "print ttft.json's document on standard output")
	fl.BoolVar(&f.verbose, "verbose", false, "show the in-process servers' logs (every request) on standard error")
	return cmd
}

func policyNames(ps []ttft.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// benchTTFT runs the benchmark: one replay per policy, then the files and
// the summary. A policy that fails is reported and the others still run;
// the files hold the policies that completed, and the error names the rest.
func benchTTFT(ctx context.Context, f benchTTFTFlags, stdout, stderr io.Writer) error {
	policies, err := ttft.ParsePolicies(f.policies)
	if err != nil {
		return err
	}
	switch {
	case f.budget < 1 || f.turns < 1 || f.sample < 1 || f.maxTokens < 1:
		return fmt.Errorf("--budget %d, --turns %d, --sample %d, --max-tokens %d: each must be at least 1", f.budget, f.turns, f.sample, f.maxTokens)
	case f.target == "" && f.bytesPerToken != 1:
		return fmt.Errorf("--bytes-per-token %v: the in-process server runs the test model, whose vocabulary is byte-level; use it with --target", f.bytesPerToken)
	}
	count, err := ttft.ChatMLCounter(f.bytesPerToken)
	if err != nil {
		return err
	}
	conv, err := benchWorkload(f)
	if err != nil {
		return err
	}
	last := count(conv.Messages(len(conv.Turns), saltOf(f.target, 0, 0)))
	fmt.Fprintf(stderr, "kvwin bench ttft: %d turns of the %s workload; history %d tokens at the last turn, %.2f× the budget of %d\n",
		len(conv.Turns), f.workload, last, float64(last)/float64(f.budget), f.budget)
	if last < 3*f.budget {
		fmt.Fprintf(stderr, "note: the history reaches less than 3× the budget; the plateau may not show\n")
	}

	srv, err := newBenchServers(f, last)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, srv.describe())
	start := time.Now()
	nonce := uint32(start.UnixNano())
	progress := ttft.NewProgress(stderr)
	var (
		report      ttft.Report
		failed      []error
		failedNames []string
	)
	for i, p := range policies {
		turns, err := srv.measure(ctx, p, ttft.Runner{
			Policy: p, Count: count, MaxTokens: f.maxTokens, Sample: f.sample,
			Salt:     saltOf(f.target, i, nonce),
			Progress: func(r ttft.TurnResult, n int) { progress.Turn(p, r, n) },
		}, conv)
		progress.Done()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p, err)
			failed, failedNames = append(failed, err), append(failedNames, string(p))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		report.Policies = append(report.Policies, ttft.Summarize(p, turns, f.budget))
	}
	if err := writeTTFTFiles(f.out, report, f.budget); err != nil {
		return err
	}
	fmt.Fprintln(stderr)
	if err := ttft.WriteTable(stderr, report); err != nil {
		return err
	}
	for _, p := range report.Policies {
		if p.Policy == ttft.Sliding {
			fmt.Fprintln(stderr)
			if err := ttft.WriteCachedShares(stderr, p, f.budget); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stderr, "\nwall time %s; wrote ttft.csv, ttft.json and ttft.svg in %s\n", time.Since(start).Round(time.Second), f.out)
	if f.asJSON {
		if err := ttft.WriteJSON(stdout, report); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		// Each failure was printed as it happened; the files hold the rest.
		return fmt.Errorf("%d of %d policies failed (%s): %w", len(failed), len(policies), strings.Join(failedNames, ", "), failed[0])
	}
	return nil
}

// benchWorkload returns the conversation of --workload, cut to --turns.
func benchWorkload(f benchTTFTFlags) (ttft.Conversation, error) {
	var load func(io.Reader) (ttft.Conversation, error)
	switch f.workload {
	case "builtin":
		g := f.gen
		g.Turns, g.BytesPerToken = f.turns, f.bytesPerToken
		return ttft.Generate(g)
	case "locomo":
		load = ttft.LoadLoCoMo
	case "sharegpt":
		load = ttft.LoadShareGPT
	default:
		return ttft.Conversation{}, fmt.Errorf("--workload %q: want builtin, locomo or sharegpt", f.workload)
	}
	if f.data == "" {
		return ttft.Conversation{}, fmt.Errorf("--workload %s needs --data FILE", f.workload)
	}
	file, err := os.Open(f.data)
	if err != nil {
		return ttft.Conversation{}, err
	}
	defer file.Close()
	conv, err := load(file)
	if err != nil {
		return ttft.Conversation{}, fmt.Errorf("%s: %w", f.data, err)
	}
	return conv.Truncate(f.turns), nil
}

// saltOf is policy i's system-prompt prefix. Against a running server
// (target set) it is "Xnnnnnn ": X a letter of its own per policy, so the
// very first token differs and no policy reuses another's cached prefix,
// and six hex digits of the run, so a rerun does not reuse an earlier
// run's; every salt has the same length, so history counts stay comparable
// across policies. A fresh server per policy needs none.
func saltOf(target string, i int, nonce uint32) string {
	if target == "" {
		return ""
	}
	return fmt.Sprintf("%c%06x ", 'A'+i%26, nonce&0xffffff)
}

// writeTTFTFiles writes ttft.csv, ttft.json and ttft.svg into dir.
func writeTTFTFiles(dir string, r ttft.Report, budget int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{
		"ttft.csv":  func(w io.Writer) error { return ttft.WriteCSV(w, r) },
		"ttft.json": func(w io.Writer) error { return ttft.WriteJSON(w, r) },
		"ttft.svg":  func(w io.Writer) error { return ttft.WriteSVG(w, r, budget) },
	} {
		path := filepath.Join(dir, name)
		file, err := os.Create(path)
		if err != nil {
			return err
		}
		err = write(file)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// benchServers gives each policy the server it is measured on: a fresh
// in-process kvwin, or the --target.
type benchServers struct {
	target  string
	model   string
	ctx     int // per-slot context of the in-process server
	threads int
	budget  int
	verbose bool // keep the servers' logs
}

// newBenchServers prepares the servers of a run whose longest prompt is
// history tokens.
func newBenchServers(f benchTTFTFlags, history int) (*benchServers, error) {
	s := &benchServers{target: f.target, threads: f.threads, budget: f.budget, verbose: f.verbose}
	if s.target != "" {
		return s, nil
	}
	model, err := ensureTinyModel(filepath.Join(os.TempDir(), "kvwin-bench"))
	if err != nil {
		return nil, err
	}
	s.model = model
	// The context holds the whole conversation with 1,024 tokens to spare:
	// kvwin serve's default window budget, the context minus an output
	// reservation of at most 1,024 tokens, then holds it too, so full never
	// has to cut. The KV memory is the only cost of the room to spare,
	// since attention runs over the cells in use.
	s.ctx = (history + 1024 + 1023) / 1024 * 1024
	return s, nil
}

func (s *benchServers) describe() string {
	if s.target != "" {
		return fmt.Sprintf("target %s: one server for every policy, not restarted between them; each policy's system prompt starts with a token of its own so no policy reuses another's cache", s.target)
	}
	return fmt.Sprintf("a fresh in-process server per policy: the test model, 1 slot of %d tokens, threads %d", s.ctx, s.threads)
}

// measure runs r (its BaseURL filled here) on policy p's server. An
// in-process server is started for the run and stopped after it.
func (s *benchServers) measure(ctx context.Context, p ttft.Policy, r ttft.Runner, conv ttft.Conversation) ([]ttft.TurnResult, error) {
	if s.target != "" {
		r.BaseURL = s.target
		return r.Run(ctx, conv)
	}
	dir, err := os.MkdirTemp("", "kvwin-bench-ttft")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	a, closeLog, err := s.newApp(s.serveFlags(p, dir))
	if err != nil {
		return nil, err
	}
	defer closeLog()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(sctx) }()
	r.BaseURL = a.URL()
	turns, err := r.Run(ctx, conv)
	cancel()
	if serr := <-done; err == nil {
		err = serr
	}
	return turns, err
}

// newApp is newApp with the server's log at warnings unless verbose: kvwin
// serve logs every request at info level, which would bury the progress
// line under hundreds of lines.
func (s *benchServers) newApp(f app.Config) (*app.App, func(), error) {
	if !s.verbose {
		f.LogLevel = slog.LevelWarn
	}
	a, err := app.New(f)
	return a, func() {}, err
}

// app.Config are the flags of policy p's in-process server: one slot, so
// nothing else shares its KV cache (the engine's attention runs over every
// slot's cells), no KV snapshots, a data dir of its own.
func (s *benchServers) serveFlags(p ttft.Policy, dataDir string) app.Config {
	f := app.Config{
		Addr: "127.0.0.1:0", DataDir: dataDir, Model: s.model, Slots: 1, Ctx: s.ctx, Threads: s.threads,
		Queue: 4, Window: "full", MaxBody: 64 << 20, ShutdownTimeout: 5 * time.Second, NoSnapshots: true,
	}
	// The window budget: the policies that cut get --budget; full and
	// full-nocache keep the server's default (the context per slot minus
	// the output reservation), which holds the whole conversation (see
	// newBenchServers), so full never cuts.
	if p.Cuts() {
		f.WindowBudget = s.budget
	}
	return f
}
