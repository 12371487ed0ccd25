// Package prefill is kvwin bench prefill: the embedded engine's prefill
// against llama.cpp driven directly, and the TTFT of a cached prefix
// against a cold one.
package prefill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/bench/stats"
	"kvwin/engine"
	"kvwin/engine/llamacpp"
)

// Result is one row of kvwin bench prefill. Every time is the best of
// --repeat runs.
type Result struct {
	Tokens int `json:"tokens"`
	// ColdMs is the engine's time to first token for the prompt sent with
	// nothing cached, into an engine holding nothing else: everything kvwin
	// does from the request to the first token, the prefill above all.
	ColdMs float64 `json:"cold_prompt_ms"`
	// RawMs is the same prompt through the binding directly (one context of
	// the same size, batches of 512, the last token's logits only).
	RawMs        float64 `json:"raw_prompt_ms"`
	ColdOverRaw  float64 `json:"cold_over_raw"`
	TokensPerSec float64 `json:"tokens_per_s"` // of the cold prefill
	// BusyMs and RawBusyMs are the same two while another slot (another
	// sequence) holds a prompt of the same size.
	BusyMs          float64 `json:"cold_busy_ms"`
	RawBusyMs       float64 `json:"raw_busy_ms"`
	BusyOverRawBusy float64 `json:"cold_busy_over_raw_busy"`
	HitMs           float64 `json:"hit_ttft_ms"`  // same prefix cached, 64 new tokens
	ColdTTFTMs      float64 `json:"cold_ttft_ms"` // the same request, nothing reused
	Ratio           float64 `json:"cold_over_hit"`
}

// Options are a bench prefill run's settings (kvwin bench prefill's flags).
type Options struct {
	// Model is the GGUF file; empty: the test model.
	Model          string
	Threads, Batch int
	// Repeat is the runs per measurement, the best reported.
	Repeat int
	// Sizes are the prompt sizes in tokens, at least 2 each.
	Sizes          []int
	FlashAttention bool
	// CPUProfile, if set, is a file for a CPU profile of the measurements.
	CPUProfile string
	// JSON: print only the rows, as JSON, on standard output.
	JSON bool
}

// Bench measures every size, printing a line per size to standard error
// and, with JSON, the rows on stdout.
func Bench(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Repeat < 1 {
		return fmt.Errorf("--repeat %d: want at least 1", o.Repeat)
	}
	largest := 0
	for _, n := range o.Sizes {
		if n < 2 {
			return fmt.Errorf("--tokens %d: want at least 2", n)
		}
		largest = max(largest, n)
	}
	if o.Model == "" {
		p, err := app.EnsureTinyModel(filepath.Join(os.TempDir(), "kvwin-bench"))
		if err != nil {
			return err
		}
		o.Model = p
	}
	cfg := llamacpp.Config{ModelPath: o.Model, Slots: 2, Ctx: largest + 256, Threads: o.Threads, Batch: o.Batch, FlashAttention: o.FlashAttention}
	b := prefillBench{repeat: o.Repeat, rng: rand.New(rand.NewPCG(7, 7))}
	var err error
	if b.pair, err = llamacpp.New(cfg, app.NewLogger(slog.LevelWarn)); err != nil {
		return err
	}
	defer b.pair.Close()
	solo := cfg
	solo.Slots = 1
	if b.solo, err = llamacpp.New(solo, app.NewLogger(slog.LevelWarn)); err != nil {
		return err
	}
	defer b.solo.Close()
	if b.raw, err = llamacpp.NewBaseline(cfg); err != nil {
		return err
	}
	defer b.raw.Close()
	stop, err := stats.CPUProfile(o.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	var rows []Result
	for _, n := range o.Sizes {
		r, err := b.measure(ctx, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%6d tokens: cold %8.1f ms vs raw %8.1f ms (%.3f×), %7.0f tok/s; beside another slot %8.1f vs %8.1f ms (%.3f×); +64 tokens TTFT cached %7.1f ms vs cold %8.1f ms (%.1f×)\n",
			n, r.ColdMs, r.RawMs, r.ColdOverRaw, r.TokensPerSec, r.BusyMs, r.RawBusyMs, r.BusyOverRawBusy, r.HitMs, r.ColdTTFTMs, r.Ratio)
		rows = append(rows, r)
	}
	if o.JSON {
		return json.NewEncoder(stdout).Encode(rows)
	}
	return nil
}

// prefillBench holds what kvwin bench prefill measures with: a one-slot
// engine whose cold prompts find the KV cache empty, as the raw side does; a
// two-slot engine for prompts beside another slot's KV and for cached
// prefixes; the binding driven directly.
type prefillBench struct {
	solo, pair *llamacpp.Engine
	raw        *llamacpp.Baseline
	repeat     int
	rng        *rand.Rand
}

func (b *prefillBench) tokens(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 'a' + b.rng.IntN(26)
	}
	return out
}

// measure runs one size. Engine and raw runs alternate, so both see the
// same machine load; each figure is the best of b.repeat.
func (b *prefillBench) measure(ctx context.Context, n int) (Result, error) {
	prompt, other := b.tokens(n), b.tokens(n)
	var cold, raw, busy, rawBusy, hit, coldExt time.Duration
	for range b.repeat {
		r, err := b.raw.Prefill(prompt)
		if err != nil {
			return Result{}, err
		}
		c, err := benchRun(ctx, b.solo, prompt, true)
		if err != nil {
			return Result{}, err
		}
		raw, cold = best(raw, r), best(cold, c.FirstToken)
	}
	for range b.repeat {
		r, err := b.raw.PrefillBeside(prompt, other)
		if err != nil {
			return Result{}, err
		}
		// other is cached in the slot used last; the cold prompt then goes to
		// the other slot.
		if _, err := benchRun(ctx, b.pair, other, false); err != nil {
			return Result{}, err
		}
		c, err := benchRun(ctx, b.pair, prompt, true)
		if err != nil {
			return Result{}, err
		}
		rawBusy, busy = best(rawBusy, r), best(busy, c.FirstToken)
	}
	for range b.repeat {
		if _, err := benchRun(ctx, b.pair, prompt, false); err != nil { // make sure the prefix is cached
			return Result{}, err
		}
		// 64 new tokens, new at every repeat, so that no run finds them cached.
		extended := append(append([]int(nil), prompt...), b.tokens(64)...)
		h, err := benchRun(ctx, b.pair, extended, false)
		if err != nil {
			return Result{}, err
		}
		c, err := benchRun(ctx, b.pair, extended, true)
		if err != nil {
			return Result{}, err
		}
		hit, coldExt = best(hit, h.FirstToken), best(coldExt, c.FirstToken)
	}
	r := Result{
		Tokens: n, ColdMs: ms(cold), RawMs: ms(raw), TokensPerSec: float64(n) / cold.Seconds(),
		BusyMs: ms(busy), RawBusyMs: ms(rawBusy), HitMs: ms(hit), ColdTTFTMs: ms(coldExt),
	}
	r.ColdOverRaw = r.ColdMs / r.RawMs
	r.BusyOverRawBusy = r.BusyMs / r.RawBusyMs
	r.Ratio = r.ColdTTFTMs / r.HitMs
	return r, nil
}

// best is the shorter of two times; zero stands for none yet.
func best(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

func benchRun(ctx context.Context, e engine.Backend, prompt []int, cold bool) (engine.Timings, error) {
	s := engine.DefaultSampling()
	s.Temperature = 0
	res, err := e.Generate(ctx, engine.Request{Tokens: prompt, MaxTokens: 1, Sampling: s, Slot: -1, NoCache: cold}, nil)
	return res.Timings, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
