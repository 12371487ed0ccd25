package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"kvwin/engine"
	"kvwin/engine/llamacpp"
)

// prefillResult is one row of kvwin bench prefill.
type prefillResult struct {
	Tokens       int     `json:"tokens"`
	ColdMs       float64 `json:"cold_prompt_ms"`
	TokensPerSec float64 `json:"tokens_per_s"`
	HitMs        float64 `json:"hit_ttft_ms"`  // same prefix cached, 64 new tokens
	ColdTTFTMs   float64 `json:"cold_ttft_ms"` // the same request, nothing cached
	Ratio        float64 `json:"cold_over_hit"`
}

func newBenchPrefillCmd() *cobra.Command {
	var (
		modelPath string
		threads   int
		sizes     []int
		asJSON    bool
		flash     bool
	)
	cmd := &cobra.Command{
		Use:   "prefill",
		Short: "Prefill speed of the embedded engine, and TTFT of a cached prefix against cold",
		Long: `For each prompt size: a cold prefill (tokens/s), then the same prompt plus 64 new
tokens with the prefix cached, against that request sent cold — TTFT side by side
in one run. Runs on the test model unless --model is given.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if modelPath == "" {
				p, err := ensureTinyModel(filepath.Join(os.TempDir(), "kvwin-bench"))
				if err != nil {
					return err
				}
				modelPath = p
			}
			largest := 0
			for _, n := range sizes {
				largest = max(largest, n)
			}
			e, err := llamacpp.New(llamacpp.Config{ModelPath: modelPath, Slots: 2, Ctx: largest + 256, Threads: threads, FlashAttention: flash}, newLogger(slog.LevelWarn))
			if err != nil {
				return err
			}
			defer e.Close()
			ctx := cmd.Context()
			rng := rand.New(rand.NewPCG(7, 7))
			var rows []prefillResult
			for _, n := range sizes {
				prompt := make([]int, n)
				for i := range prompt {
					prompt[i] = 'a' + rng.IntN(26)
				}
				extended := append(append([]int(nil), prompt...), make([]int, 64)...)
				for i := n; i < len(extended); i++ {
					extended[i] = 'a' + rng.IntN(26)
				}
				cold, err := benchRun(ctx, e, prompt, true)
				if err != nil {
					return err
				}
				if _, err := benchRun(ctx, e, prompt, false); err != nil { // make sure the prefix is cached
					return err
				}
				hit, err := benchRun(ctx, e, extended, false)
				if err != nil {
					return err
				}
				coldExt, err := benchRun(ctx, e, extended, true)
				if err != nil {
					return err
				}
				r := prefillResult{
					Tokens: n, ColdMs: ms(cold.PromptEval), TokensPerSec: float64(n) / cold.PromptEval.Seconds(),
					HitMs: ms(hit.FirstToken), ColdTTFTMs: ms(coldExt.FirstToken),
				}
				r.Ratio = r.ColdTTFTMs / r.HitMs
				fmt.Fprintf(os.Stderr, "%6d tokens: cold prefill %8.1f ms (%7.0f tok/s); +64 tokens TTFT cached %7.1f ms vs cold %8.1f ms (%.1f×)\n",
					n, r.ColdMs, r.TokensPerSec, r.HitMs, r.ColdTTFTMs, r.Ratio)
				rows = append(rows, r)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rows)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "GGUF model (default: the test model)")
	f.IntVar(&threads, "threads", runtime.NumCPU(), "compute threads")
	f.IntSliceVar(&sizes, "tokens", []int{1024, 4096}, "prompt sizes")
	f.BoolVar(&asJSON, "json", false, "print JSON on standard output")
	f.BoolVar(&flash, "flash-attn", false, "use flash attention")
	return cmd
}

func benchRun(ctx context.Context, e engine.Backend, prompt []int, cold bool) (engine.Timings, error) {
	s := engine.DefaultSampling()
	s.Temperature = 0
	res, err := e.Generate(ctx, engine.Request{Tokens: prompt, MaxTokens: 1, Sampling: s, Slot: -1, NoCache: cold}, nil)
	return res.Timings, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
