// Package overhead is kvwin bench overhead: what a server spends on a turn
// besides llama.cpp's prompt decode, as the conversation grows. Each
// history length is one conversation whose turns change only the last
// short message, so the backend reuses everything else and computes a few
// tokens; the client's latency minus the server's prompt time
// (X-Kvwin-Prompt-Ms, or llama-server's timings.prompt_ms) is the
// overhead: rendering, tokenizing, keying, the window, HTTP.
package overhead

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/bench/chat"
	"kvwin/cmd/kvwin/bench/stats"
	"kvwin/cmd/kvwin/config"
	"kvwin/gguf"
)

// Options are a bench overhead run's settings (its flags).
type Options struct {
	// Models are GGUF files served in process, one server each; empty and
	// no Target: the test model.
	Models []string
	// Vocab, if set, is a real vocabulary (kvwin model tiny --vocab) the
	// test model is written with when no Models are given: the same
	// weights' work with a real tokenizer's counts and costs.
	Vocab string
	// Target, if set, is an OpenAI-compatible server measured instead
	// (kvwin, llama-server, …); TargetModel is the model its requests name.
	Target, TargetModel string
	// Messages are the history lengths, each even and at least 2.
	Messages []int
	// Turns are the measured turns per length, after Warmup turns (at
	// least one: the first fills the cache the others reuse). A fresh
	// server's first turns also pay for its heap's first growth into new
	// pages (page faults, about 15 µs a page on a virtual machine) until
	// the heap settles: on the test model at 242 messages, turns that
	// touched new pages took 0.2–0.4 ms more, over about the first 100
	// turns of a run. More warm-up turns measure a server that has run a
	// while.
	Turns   int
	Warmup  int
	Threads int
	// Ctx is the in-process server's context (one slot).
	Ctx int
	// Window is the in-process server's window policy (default full) and
	// WindowBudget its budget (0: the server's default); a history beyond
	// it is cut the same way every turn, which stays fully cached.
	Window       string
	WindowBudget int
	// CPUProfile, if set, is a file for a CPU profile of the measured turns
	// (in process only: it profiles this process).
	CPUProfile string
	// MemProfile, if set, is a file for the allocations of the run (in
	// process only), written at its end.
	MemProfile string
	// Gateway also measures, in the same run, a gateway (kvwin serve
	// --backend llamaserver=NODE, in process) over each in-process node:
	// the node alone first, then through the gateway.
	Gateway bool
	// Catalog also measures, in the same run, each in-process model served
	// from a models: config of two embedded entries (the model, and the
	// same file under a second name, never asked for): the node alone
	// first, then through the catalog.
	Catalog bool
	// Chain, if set, measures a Responses chain of that many turns instead
	// of the lengths: its first and last turns (chain.go).
	Chain int
	JSON  bool

	// seed makes the run's conversations (one per length): every server of
	// a run gets the same ones, so their rows compare the same prompts.
	seed uint64
}

// Row is one history length on one server. Times are medians over the
// turns, in milliseconds; the overhead is the median of each turn's own
// difference.
type Row struct {
	Model string `json:"model"`
	// Via is "gateway" for a row measured through a gateway over the
	// node, "catalog" for one through a models: config serving the node's
	// model, empty for the server alone.
	Via string `json:"via,omitempty"`
	// Turns, on a --chain row, is the span of the chain's turns it
	// summarizes ("1-100"); Messages is then the history at its end.
	Turns        string  `json:"turns,omitempty"`
	Messages     int     `json:"messages"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	LatencyMs    float64 `json:"latency_ms"`
	PromptMs     float64 `json:"prompt_ms"`
	OverheadMs   float64 `json:"overhead_ms"`
	// Allocs and AllocKB are heap allocations per turn in this process
	// (client and in-process server); 0 against a Target.
	Allocs  float64 `json:"allocs_per_turn"`
	AllocKB float64 `json:"alloc_kb_per_turn"`
	// Phases are the medians of the Server-Timing phases, where the server
	// sends them.
	Phases map[string]float64 `json:"phases_ms,omitempty"`
}

// Bench measures every length on every server, one line per row on
// standard error and, with JSON, the rows on stdout.
func Bench(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Turns < 1 {
		return fmt.Errorf("--turns %d: want at least 1", o.Turns)
	}
	if o.Warmup < 1 {
		return fmt.Errorf("--warmup %d: want at least 1 (the first turn fills the cache)", o.Warmup)
	}
	for _, n := range o.Messages {
		if n < 2 || n%2 != 0 {
			return fmt.Errorf("--messages %d: want an even number, at least 2", n)
		}
	}
	if o.Chain == 1 || o.Chain < 0 {
		return fmt.Errorf("--chain %d: want at least 2 turns", o.Chain)
	}
	if o.Vocab != "" && (len(o.Models) > 0 || o.Target != "") {
		return errors.New("--vocab writes the test model: not with --model or --target")
	}
	if (o.Gateway || o.Catalog) && o.Target != "" {
		return errors.New("--gateway and --catalog serve the in-process model: not with --target")
	}
	o.seed = uint64(time.Now().UnixNano()%1e6) * 10
	stop, err := stats.CPUProfile(o.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	var rows []Row
	if o.Target != "" {
		r, err := measure(ctx, o, o.Target, o.TargetModel, o.Target)
		if err != nil {
			return err
		}
		rows = r
	} else {
		if len(o.Models) == 0 {
			p, cleanup, err := testModel(o.Vocab)
			if err != nil {
				return err
			}
			defer cleanup()
			o.Models = []string{p}
		}
		for _, m := range o.Models {
			r, err := serveAndMeasure(ctx, o, m)
			if err != nil {
				return err
			}
			rows = append(rows, r...)
		}
	}
	if err := stats.MemProfile(o.MemProfile); err != nil {
		return err
	}
	if o.JSON {
		return json.NewEncoder(stdout).Encode(rows)
	}
	return nil
}

// testModel is the test model, with vocab's vocabulary if set (written
// to a temporary file that cleanup removes; it takes seconds, the run
// minutes).
func testModel(vocab string) (path string, cleanup func(), err error) {
	if vocab == "" {
		p, err := app.EnsureTinyModel(filepath.Join(os.TempDir(), "kvwin-bench"))
		return p, func() {}, err
	}
	dir, err := os.MkdirTemp("", "kvwin-bench-vocab-")
	if err != nil {
		return "", nil, err
	}
	c := gguf.DefaultTinyConfig()
	c.VocabPath = vocab
	path = filepath.Join(dir, "kvwin-tiny-"+filepath.Base(filepath.Clean(vocab))+".gguf")
	if err := gguf.WriteTiny(path, c); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// serveAndMeasure starts kvwin serve in process on model (one slot,
// --window full unless o.Window says, no snapshots) and measures it, with
// o.Gateway a gateway over it after, and with o.Catalog the same model
// served from a models: config last.
func serveAndMeasure(ctx context.Context, o Options, model string) ([]Row, error) {
	label := filepath.Base(model)
	rows, err := serving(ctx, app.Config{Model: model, Slots: 1, Ctx: o.Ctx, Threads: o.Threads}, o, func(url string) ([]Row, error) {
		rows, err := measure(ctx, o, url, "", label)
		if err == nil && o.Gateway {
			var gw []Row
			gw, err = via(ctx, o, app.Config{Backends: []string{"llamaserver=" + url}}, "", label, "gateway")
			rows = append(rows, gw...)
		}
		return rows, err
	})
	if err == nil && o.Catalog {
		// Two embedded entries, so requests take the catalog's path (select
		// by name, hold the entry); the second is never asked for, so never
		// loaded, and the first has the one slot and context of the node.
		models := []config.Model{{Name: "bench", Model: model}, {Name: "bench-2", Model: model}}
		var cat []Row
		cat, err = via(ctx, o, app.Config{Models: models, Slots: 1, Ctx: o.Ctx, Threads: o.Threads}, "bench", label, "catalog")
		rows = append(rows, cat...)
	}
	return rows, err
}

// via serves cfg in process (a gateway over the node, or a catalog of the
// node's model) and measures it with requests naming model; its rows are
// label's, marked as measured via how.
func via(ctx context.Context, o Options, cfg app.Config, model, label, how string) ([]Row, error) {
	return serving(ctx, cfg, o, func(url string) ([]Row, error) {
		rows, err := measure(ctx, o, url, model, label+" via "+how)
		for i := range rows {
			rows[i].Model, rows[i].Via = label, how
		}
		return rows, err
	})
}

// serving runs kvwin serve in process with cfg (what serves) and the
// bench's settings (a temporary data directory, a free port, o's window,
// no snapshots) while measure measures it at its URL, then stops it.
func serving(ctx context.Context, cfg app.Config, o Options, measure func(url string) ([]Row, error)) ([]Row, error) {
	dir, err := os.MkdirTemp("", "kvwin-bench-overhead-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg.Addr, cfg.DataDir, cfg.Queue = "127.0.0.1:0", dir, 4
	cfg.Window, cfg.WindowBudget = cmp.Or(o.Window, "full"), o.WindowBudget
	cfg.MaxBody, cfg.ShutdownTimeout, cfg.NoSnapshots, cfg.LogLevel = 64<<20, 5*time.Second, true, slog.LevelWarn
	a, err := app.New(cfg)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(sctx) }()
	rows, err := measure(a.URL())
	cancel()
	if serr := <-done; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	return rows, err
}

// measure runs every length against the server at base.
func measure(ctx context.Context, o Options, base, model, label string) ([]Row, error) {
	// Buffers that take a long history's body in one write: with the
	// default 4 KiB, the client's own copying and syscalls grow with the
	// body and count as the server's overhead.
	hc := &http.Client{Transport: &http.Transport{WriteBufferSize: 64 << 10, ReadBufferSize: 64 << 10}}
	if o.Chain > 0 {
		return measureChain(ctx, o, hc, base, model, label)
	}
	url := strings.TrimSuffix(base, "/") + "/v1/chat/completions"
	var rows []Row
	for i, n := range o.Messages {
		seed := o.seed + uint64(i)
		var samples []sample
		for t := 0; t < o.Warmup+o.Turns; t++ { // turn 0 fills the cache
			b, err := json.Marshal(body{Model: model, Messages: History(seed, n, t), MaxTokens: 1, CachePrompt: true})
			if err != nil {
				return nil, err
			}
			s, _, err := turn(ctx, hc, url, b)
			if err != nil {
				return nil, fmt.Errorf("%s, %d messages, turn %d: %w", label, n, t, err)
			}
			if t >= o.Warmup {
				samples = append(samples, s)
			}
		}
		r := summarize(label, n, samples)
		fmt.Fprintf(os.Stderr, "%-26s %4d messages %6d tokens (%6d cached): latency %7.2f ms, prompt %6.2f ms, overhead %6.2f ms, %7.0f allocs %8.1f KB/turn%s\n",
			label, n, r.PromptTokens, r.CachedTokens, r.LatencyMs, r.PromptMs, r.OverheadMs, r.Allocs, r.AllocKB, chat.PhaseText(r.Phases))
		rows = append(rows, r)
	}
	return rows, nil
}

func summarize(label string, n int, ss []sample) Row {
	var lat, prompt, over, allocs, kb []float64
	phases := map[string][]float64{}
	for _, s := range ss {
		ms := float64(s.latency.Microseconds()) / 1000
		lat, prompt, over = append(lat, ms), append(prompt, s.promptMs), append(over, ms-s.promptMs)
		allocs, kb = append(allocs, float64(s.mallocs)), append(kb, float64(s.bytes)/1024)
		for name, d := range chat.ServerTiming(s.timing) {
			phases[name] = append(phases[name], d)
		}
	}
	r := Row{Model: label, Messages: n, LatencyMs: stats.Quantile(lat, 0.5), PromptMs: stats.Quantile(prompt, 0.5),
		OverheadMs: stats.Quantile(over, 0.5), Allocs: stats.Quantile(allocs, 0.5), AllocKB: stats.Quantile(kb, 0.5)}
	if last := ss[len(ss)-1]; true {
		r.PromptTokens, r.CachedTokens = last.prompt, last.cached
	}
	if len(phases) > 0 {
		r.Phases = map[string]float64{}
		for name, ds := range phases {
			r.Phases[name] = stats.Quantile(ds, 0.5)
		}
	}
	return r
}
