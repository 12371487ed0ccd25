package main

import (
	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/overhead"
)

func newBenchOverheadCmd() *cobra.Command {
	var o overhead.Options
	cmd := &cobra.Command{
		Use:   "overhead",
		Short: "Per-turn cost besides llama.cpp's prompt decode, against the length of the conversation",
		Long: `For each history length (--messages), one conversation whose turns change only
the last short message, so the server reuses its KV for everything else: the
median over --turns turns (after --warmup turns) of the client's latency of a
one-token, non-streamed chat completion, of the server's prompt decode time
(X-Kvwin-Prompt-Ms; llama-server's timings.prompt_ms), of their difference
(the overhead), and of heap allocations per turn (this process: the client
and, in process, the server), with the Server-Timing phases where the server
sends them.

Each --model is served in process (one slot, --window full, no snapshots);
without one, the test model (--vocab DIR: written with that real vocabulary,
as kvwin model tiny --vocab). --target URL measures any OpenAI-compatible
server the same way instead (e.g. a llama-server: run it with one slot).
--gateway also measures, in the same run, a gateway in process over each
in-process server (kvwin serve --backend llamaserver=URL): the server alone
first, then through the gateway; the difference is the gateway's cost.
--catalog also measures, in the same run, each model served from a models:
config of two embedded entries (the model and the same file under a second
name, never loaded), last: the difference is the catalog's cost.

--chain N measures a Responses chain of N turns instead of the lengths: each
turn sends only its new input with previous_response_id (non-streamed, one
token), and the rows summarize its first and last 100 turns (halves of a
shorter chain), with the window phase's ratio between them.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return overhead.Bench(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Models, "model", nil, "GGUF models to serve in process, each measured in turn (default: the test model)")
	f.StringVar(&o.Vocab, "vocab", "", "write the test model with this real vocabulary (as kvwin model tiny --vocab: a directory with Llama 3's encoder.json and vocab.bpe, or a tokenizer.model)")
	f.StringVar(&o.Target, "target", "", "measure this OpenAI-compatible server (base URL) instead")
	f.StringVar(&o.TargetModel, "target-model", "", "the model name --target's requests carry")
	f.IntSliceVar(&o.Messages, "messages", []int{2, 42, 122, 242}, "history lengths, in messages")
	f.IntVar(&o.Turns, "turns", 20, "measured turns per length")
	f.IntVar(&o.Warmup, "warmup", 1, "turns sent before the measured ones, per length (at least 1: the first fills the cache; a fresh server's first turns also pay for its heap's first growth, so more measure a server that has run a while)")
	f.IntVar(&o.Threads, "threads", 1, "compute threads of the in-process server")
	f.IntVar(&o.Ctx, "ctx", 8192, "context of the in-process server's one slot")
	f.StringVar(&o.Window, "window", "full", "window policy of the in-process server: full, sliding, sink or memory (a longer history is cut the same way every turn)")
	f.IntVar(&o.WindowBudget, "window-budget", 0, "window budget of the in-process server (default: its context less the output reservation)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to this file (in process)")
	f.StringVar(&o.MemProfile, "memprofile", "", "write the run's allocations (pprof allocs profile) to this file (in process)")
	f.BoolVar(&o.Gateway, "gateway", false, "also measure through a gateway (in process, --backend llamaserver=) over each in-process server, in the same run")
	f.BoolVar(&o.Catalog, "catalog", false, "also measure each in-process model served from a models: config of two embedded entries, in the same run")
	f.IntVar(&o.Chain, "chain", 0, "measure a Responses chain of this many turns (previous_response_id) instead of --messages: its first and last 100 turns")
	f.BoolVar(&o.JSON, "json", false, "print only JSON on standard output (the table goes to standard error)")
	return cmd
}
