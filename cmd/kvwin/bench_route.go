package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/route"
	"kvwin/router"
)

func newBenchRouteCmd() *cobra.Command {
	w := route.DefaultWorkload()
	var (
		nodes       int
		policies    []string
		asJSON      bool
		snapshots   bool
		nodeThreads int
		backends    []string
	)
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Routing policies side by side: a gateway over N kvwin nodes on llm-d's workload shape",
		Long: `Starts N kvwin nodes (subprocesses on the test model, --slots 2
--threads 1, each in its own process group and killed with the bench) and an
in-process gateway, and replays for each routing policy, on fresh nodes, the
same workload: groups of conversations sharing a long system prompt, each
conversation growing over its turns, turns in a seeded random order with at
most --concurrency in flight. The nodes' context per slot is sized to the
workload (its longest prompt, its answer and the output reservation), so
every turn is answered whole. Reports per policy: cached-token share,
prefill tokens (prompt − cached, summed), TTFT p50/p90, requests/s, errors,
and the oracle: the prefill a perfect router with an unbounded cache would
pay for the same turns, with the policy's ratio to it. "computed" is what the
backends themselves say they computed (timings.prompt_n of every answer,
summed by a proxy in front of each), whatever the gateway made of it.

With --backend llamaserver=URL (repeatable) it starts no nodes and runs the
workload against servers you started (llama-server, or kvwin nodes), on
127.0.0.1 or wherever they are: a fresh gateway per policy, and per policy
the conversations' text drawn anew (same lengths, same order), so that what
one policy left in the servers' slots or prompt caches is no help to the
next. Size the servers' slots for the workload: at least the context a node
would get (printed), e.g. llama-server -np 2 -c 2×that (the June 2025 build
divides -c among the slots) or --ctx-size that × slots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			urls, err := routeBackendURLs(backends)
			if err != nil {
				return err
			}
			results, err := route.Bench(cmd.Context(), w, route.Options{Policies: policies, Backends: urls,
				Nodes: nodes, NodeThreads: nodeThreads, Snapshots: snapshots})
			if err != nil {
				return err
			}
			route.PrintTable(os.Stderr, results)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(results)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "kvwin nodes")
	f.StringArrayVar(&backends, "backend", nil, "llamaserver=URL of a server to run against instead of starting nodes (repeatable)")
	f.StringSliceVar(&policies, "policies", router.Policies(), "routing policies to compare")
	f.BoolVar(&asJSON, "json", false, "print JSON on standard output")
	f.BoolVar(&snapshots, "snapshots", true, "nodes keep KV snapshots of evicted conversations (kvwin's default)")
	f.IntVar(&nodeThreads, "node-threads", 1, "compute threads per node (keep nodes × this ≤ cores)")
	f.IntVar(&w.Groups, "groups", w.Groups, "conversation groups (each shares a system prompt)")
	f.IntVar(&w.PerGroup, "per-group", w.PerGroup, "conversations per group")
	f.IntVar(&w.Turns, "turns", w.Turns, "turns per conversation")
	f.IntVar(&w.SystemBytes, "system-tokens", w.SystemBytes, "system prompt length (the test model: a token per byte)")
	f.IntVar(&w.UserBytes, "user-tokens", w.UserBytes, "user message length")
	f.IntVar(&w.Concurrency, "concurrency", w.Concurrency, "turns in flight at once")
	f.Uint64Var(&w.Seed, "seed", w.Seed, "workload and order seed")
	return cmd
}

// routeBackendURLs checks the --backend specs: llamaserver=URL each.
func routeBackendURLs(specs []string) ([]string, error) {
	var out []string
	for _, s := range specs {
		u, ok := strings.CutPrefix(s, "llamaserver=")
		if !ok || u == "" {
			return nil, fmt.Errorf("--backend %q: want llamaserver=URL (a llama-server or a kvwin node)", s)
		}
		out = append(out, strings.TrimSuffix(u, "/"))
	}
	return out, nil
}
