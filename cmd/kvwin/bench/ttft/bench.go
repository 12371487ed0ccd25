package ttft

import (
	"context"
	"fmt"
	"io"
	"kvwin/cmd/kvwin/bench/stats"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"kvwin/cmd/kvwin/app"
)

// Options are a kvwin bench ttft run (its flags).
type Options struct {
	// Target is the base URL of a running server to measure; empty: a
	// fresh in-process server per policy (the test model, Threads compute
	// threads, Verbose: its logs shown).
	Target   string
	Threads  int
	Turns    int
	Policies []string
	// Budget is the window budget in tokens of the policies that cut.
	Budget int
	// Sample: measure full-nocache only every Sample-th turn (and the last).
	Sample int
	// Workload is builtin (Gen), locomo or sharegpt (the last two read
	// Data).
	Workload      string
	Data          string
	Gen           GeneratorConfig
	BytesPerToken float64
	MaxTokens     int
	// Out is the directory for ttft.csv, ttft.json and ttft.svg; JSON also
	// prints ttft.json's document on stdout.
	Out     string
	JSON    bool
	Verbose bool
	// API is chat (APIChat, the default) or responses (APIResponses):
	// each policy replayed through the Responses API, sending only new
	// input, and beside it through chat completions with the same replies.
	API string
	// CPUProfile, if set, is a file for a CPU profile of the whole run
	// (the in-process servers included).
	CPUProfile string
}

// Bench runs the benchmark: one replay per policy, then the files and
// the summary. A policy that fails is reported and the others still run;
// the files hold the policies that completed, and the error names the rest.
func Bench(ctx context.Context, f Options, stdout, stderr io.Writer) error {
	policies, err := ParsePolicies(f.Policies)
	if err != nil {
		return err
	}
	stop, err := stats.CPUProfile(f.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	switch {
	case f.Budget < 1 || f.Turns < 1 || f.Sample < 1 || f.MaxTokens < 1:
		return fmt.Errorf("--budget %d, --turns %d, --sample %d, --max-tokens %d: each must be at least 1", f.Budget, f.Turns, f.Sample, f.MaxTokens)
	case f.Target == "" && f.BytesPerToken != 1:
		return fmt.Errorf("--bytes-per-token %v: the in-process server runs the test model, whose vocabulary is byte-level; use it with --target", f.BytesPerToken)
	}
	count, err := ChatMLCounter(f.BytesPerToken)
	if err != nil {
		return err
	}
	conv, err := benchWorkload(f)
	if err != nil {
		return err
	}
	last := count(conv.Messages(len(conv.Turns), saltOf(f.Target, 0, 0)))
	fmt.Fprintf(stderr, "kvwin bench ttft: %d turns of the %s workload; history %d tokens at the last turn, %.2f× the budget of %d\n",
		len(conv.Turns), f.Workload, last, float64(last)/float64(f.Budget), f.Budget)
	if last < 3*f.Budget {
		fmt.Fprintf(stderr, "note: the history reaches less than 3× the budget; the plateau may not show\n")
	}

	srv, err := newBenchServers(f, last)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, srv.describe())
	start := time.Now()
	nonce := uint32(start.UnixNano())
	progress := NewProgress(stderr)
	var (
		report      Report
		failed      []error
		failedNames []string
	)
	for i, p := range policies {
		runner := Runner{
			Policy: p, Count: count, MaxTokens: f.MaxTokens, Sample: f.Sample,
			Salt:     saltOf(f.Target, i, nonce),
			Progress: func(r TurnResult, n int) { progress.Turn(p, r, n) },
		}
		results, err := srv.replay(ctx, f.API, p, runner, conv)
		progress.Done()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p, err)
			failed, failedNames = append(failed, err), append(failedNames, string(p))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		for _, r := range results {
			sum := Summarize(p, r.turns, f.Budget)
			sum.API = r.api
			report.Policies = append(report.Policies, sum)
		}
		if len(results) == 2 {
			fmt.Fprintln(stderr)
			if err := WriteAPIComparison(stderr, p, results[0].turns, results[1].turns); err != nil {
				return err
			}
		}
	}
	if err := writeTTFTFiles(f.Out, report, f.Budget); err != nil {
		return err
	}
	fmt.Fprintln(stderr)
	if err := WriteTable(stderr, report); err != nil {
		return err
	}
	for _, p := range report.Policies {
		if p.Policy == Sliding {
			fmt.Fprintln(stderr)
			if err := WriteCachedShares(stderr, p, f.Budget); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stderr, "\nwall time %s; wrote ttft.csv, ttft.json and ttft.svg in %s\n", time.Since(start).Round(time.Second), f.Out)
	if f.JSON {
		if err := WriteJSON(stdout, report); err != nil {
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
func benchWorkload(f Options) (Conversation, error) {
	var load func(io.Reader) (Conversation, error)
	switch f.Workload {
	case "builtin":
		g := f.Gen
		g.Turns, g.BytesPerToken = f.Turns, f.BytesPerToken
		return Generate(g)
	case "locomo":
		load = LoadLoCoMo
	case "sharegpt":
		load = LoadShareGPT
	default:
		return Conversation{}, fmt.Errorf("--workload %q: want builtin, locomo or sharegpt", f.Workload)
	}
	if f.Data == "" {
		return Conversation{}, fmt.Errorf("--workload %s needs --data FILE", f.Workload)
	}
	file, err := os.Open(f.Data)
	if err != nil {
		return Conversation{}, err
	}
	defer file.Close()
	conv, err := load(file)
	if err != nil {
		return Conversation{}, fmt.Errorf("%s: %w", f.Data, err)
	}
	return conv.Truncate(f.Turns), nil
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
func writeTTFTFiles(dir string, r Report, budget int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{
		"ttft.csv":  func(w io.Writer) error { return WriteCSV(w, r) },
		"ttft.json": func(w io.Writer) error { return WriteJSON(w, r) },
		"ttft.svg":  func(w io.Writer) error { return WriteSVG(w, r, budget) },
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
func newBenchServers(f Options, history int) (*benchServers, error) {
	s := &benchServers{target: f.Target, threads: f.Threads, budget: f.Budget, verbose: f.Verbose}
	if s.target != "" {
		return s, nil
	}
	model, err := app.EnsureTinyModel(filepath.Join(os.TempDir(), "kvwin-bench"))
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

// measure runs run with r (its BaseURL filled here) on policy p's server.
// An in-process server is started for the run and stopped after it.
func (s *benchServers) measure(ctx context.Context, p Policy, r Runner, run func(Runner) ([]TurnResult, error)) ([]TurnResult, error) {
	if s.target != "" {
		r.BaseURL = s.target
		return run(r)
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
	turns, err := run(r)
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
func (s *benchServers) serveFlags(p Policy, dataDir string) app.Config {
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
