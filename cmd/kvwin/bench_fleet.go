package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/fleet"
)

func newBenchFleetCmd() *cobra.Command {
	w := fleet.DefaultWorkload()
	var (
		nodes, slots int
		loads        []float64
		policies     []string
		kind, trace  string
		out          string
		asJSON       bool
		parallel     int
		cacheRAM     int64
		tiers        string
		kvRAM, disk  int64
	)
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Routing at fleet scale: kvwin's router and llm-d's, SGLang's and Dynamo's policies over a simulated fleet",
		Long: `Simulates, in simulated time, a fleet of --nodes nodes × --slots slots
(llama-server's slots, or kvwin nodes' with prefix copy, and with --tiers
their snapshots in RAM then on disk)
driven by kvwin's own router as serve runs it, once per policy and load:
kvwin's policies and llm-d's (its default profile and its "sticky until
saturated", llm-d-sticky), SGLang's and Dynamo's as its scorers. The
workload is multi-turn conversations (Poisson arrivals, think times of 30 s,
8 shared system prompts of 1,000 tokens, LoCoMo-shaped turn lengths), or
with --trace a Mooncake-format trace (JSON lines of timestamp, input_length,
output_length, hash_ids). --load is the offered prefill work as a share of
the fleet's prefill capacity, every prompt counted whole. Reports per
policy and load TTFT p50/p90/p99, queueing, prefill tokens against the
oracle's, hit rate and throughput; writes fleet.json, fleet.csv and
fleet.svg (TTFT p90 against load) into --out. What the simulation leaves
out: docs/benchmarks.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cacheRAM < 0 || cacheRAM > 1<<30 {
				return fmt.Errorf("--cache-ram %d: want 0 to %d MiB", cacheRAM, 1<<30)
			}
			switch {
			case tiers != "off" && tiers != "on" && tiers != "both":
				return fmt.Errorf("--tiers %q: want off, on or both", tiers)
			case kvRAM < 0 || kvRAM > 1<<30 || disk < 0 || disk > 1<<30:
				return fmt.Errorf("--kv-ram %d, --kv-disk %d: want 0 to %d MiB", kvRAM, disk, 1<<30)
			case tiers == "off":
				kvRAM, disk = 0, 0
			}
			o := fleet.Options{Nodes: nodes, Slots: slots, Kind: kind, CacheRAM: cacheRAM << 20, Policies: policies, Loads: loads, Workload: w,
				Tiers: fleet.Tiers{RAMBytes: kvRAM << 20, DiskBytes: disk << 20}, WithoutTiers: tiers == "both",
				Model: fleet.DefaultNodeModel(), Parallel: parallel, Progress: func(r fleet.Row) {
					fmt.Fprintf(os.Stderr, "load %.2f %-12s ttft p90 %8.0f ms, prefill %.2f× the oracle's (%.1f s)\n",
						r.Load, r.Policy, r.TTFTP90, r.PrefillVsOracle, r.WallSeconds)
				}}
			if trace != "" {
				if err := readTrace(trace, cmd.Flags().Changed("ctx"), &o); err != nil {
					return err
				}
			}
			rows, err := fleet.Bench(cmd.Context(), o)
			if err != nil {
				return err
			}
			fleet.PrintTable(os.Stderr, rows)
			fleet.PrintExcess(os.Stderr, rows)
			if out != "" {
				if err := fleet.WriteFiles(out, rows); err != nil {
					return err
				}
			}
			if asJSON {
				return fleet.WriteJSON(cmd.OutOrStdout(), rows)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 64, "nodes in the fleet")
	f.IntVar(&slots, "slots", 4, "slots per node")
	f.Float64SliceVar(&loads, "load", []float64{0.2, 0.6, 1.0}, "offered loads: shares of the fleet's prefill capacity")
	f.StringSliceVar(&policies, "policies", fleet.AllPolicies(), "routing policies to compare")
	f.StringVar(&kind, "node-kind", fleet.KindLlamaServer, "llamaserver (a slot reuses only its own KV) or kvwin (prefix copy between slots; snapshots with --tiers)")
	f.Int64Var(&cacheRAM, "cache-ram", 0, "each llama-server's host-memory prompt cache in MiB, as its --cache-ram (8192 in its builds since autumn 2025); 0: none")
	f.StringVar(&tiers, "tiers", "off", "kvwin nodes' snapshot tiers: off, on (RAM then disk, as --kv-ram and --kv-disk), or both (every policy with and without)")
	f.Int64Var(&kvRAM, "kv-ram", fleet.DefaultRAMTier>>20, "each kvwin node's RAM tier of snapshots in MiB, as its --kv-ram (default: its rule, an eighth of MemAvailable at most 4 GiB, on a GPU host)")
	f.Int64Var(&disk, "kv-disk", fleet.DefaultDiskTier>>20, "each kvwin node's disk tier of snapshots in MiB, as its --snapshot-max-bytes")
	f.StringVar(&trace, "trace", "", "replay a Mooncake-format trace (JSON lines) instead of the synthetic conversations")
	f.StringVar(&out, "out", "", "directory for fleet.json, fleet.csv and fleet.svg")
	f.IntVar(&parallel, "parallel", 2, "runs simulated at once (one core each)")
	f.BoolVar(&asJSON, "json", false, "print the rows as one JSON array on standard output")
	f.IntVar(&w.Conversations, "conversations", w.Conversations, "conversations in the workload")
	f.IntVar(&w.Context, "ctx", w.Context, "KV tokens per slot (with --trace, default: the trace's longest request, rounded up to a power of two)")
	f.Uint64Var(&w.Seed, "seed", w.Seed, "seed of the workload and its arrivals")
	f.Float64Var(&w.Regenerate, "regenerate", 0, "share of turns sent again once answered (a retry, a regenerate), after a wait of mean 5 s")
	return cmd
}

// readTrace reads the Mooncake trace at path into o. Unless --ctx was set,
// slots hold the trace's longest request; if it was, the requests that
// cannot fit are counted on standard error.
func readTrace(path string, ctxSet bool, o *fleet.Options) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	o.Trace, err = fleet.ReadMooncake(f)
	f.Close()
	if err != nil {
		return err
	}
	switch over := fleet.TraceOver(o.Trace, o.Workload.Context); {
	case !ctxSet:
		o.Workload.Context = fleet.TraceContext(o.Trace, o.Workload.Context)
		fmt.Fprintf(os.Stderr, "trace: %d requests, slots of %d tokens (its longest request, to a power of two; --ctx sets it)\n", len(o.Trace), o.Workload.Context)
	case over > 0:
		fmt.Fprintf(os.Stderr, "trace: %d of %d requests are longer than --ctx %d: each is an error of every policy\n", over, len(o.Trace), o.Workload.Context)
	}
	return nil
}
