package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/prefill"
	"kvwin/engine/llamacpp"
)

func newBenchPrefillCmd() *cobra.Command {
	var (
		o    prefill.Options
		long bool
	)
	cmd := &cobra.Command{
		Use:   "prefill",
		Short: "Prefill speed of the embedded engine against llama.cpp driven directly, and TTFT of a cached prefix against cold",
		Long: `For each prompt size, side by side in one run, each time the best of --repeat:
  - the prompt prefilled cold by the engine (time to first token, nothing else
    in its KV cache), against the same prompt decoded through the llama.cpp
    binding directly (one context of the same size, batches of 512, the last
    token's logits only): what kvwin adds;
  - the same two while another slot holds a prompt of the same size (llama.cpp
    attends over every KV cell up to the highest in use);
  - the prompt plus 64 new tokens with the prompt cached, against that request
    with nothing reused.
Runs on the test model unless --model is given.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if long {
				o.Sizes = append(o.Sizes, 16384)
			}
			return prefill.Bench(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "", "GGUF model (default: the test model)")
	f.IntVar(&o.Threads, "threads", runtime.NumCPU(), "compute threads")
	f.IntVar(&o.Batch, "batch", llamacpp.DefaultConfig().Batch, fmt.Sprintf("the engine's tokens per llama_decode, 1..%d (the raw side always uses 512)", llamacpp.MaxBatch))
	f.IntVar(&o.Repeat, "repeat", 1, "runs per measurement; the best is reported")
	f.IntSliceVar(&o.Sizes, "tokens", []int{1024, 4096}, "prompt sizes")
	f.BoolVar(&long, "long", false, "also measure 16,384 tokens")
	f.BoolVar(&o.JSON, "json", false, "print only JSON on standard output (the table goes to standard error)")
	f.BoolVar(&o.FlashAttention, "flash-attn", false, "use flash attention (both sides)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the measurements to this file")
	return cmd
}
