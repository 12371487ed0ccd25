package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/recall"
	"kvwin/window"
)

// newBenchRecallCmd returns `kvwin bench recall`: window policies evaluated
// offline on a LoCoMo-format file, recall and stale share per policy and
// budget. No engine is needed.
func newBenchRecallCmd() *cobra.Command {
	var (
		data, format string
		budgets      []string
		policies     []string
		asJSON       bool
		packets      string
		noReplay     bool
		seeds        []int64
		family       string
		genTurns     int
		share, cap   float64
		stmtCap      float64
		msgShare     float64
		low          float64
	)
	cmd := &cobra.Command{
		Use:   "recall --data FILE --format locomo --budget N[,N...]",
		Short: "Measure how much evidence each window policy keeps, offline",
		Long: `Builds, for every question of a LoCoMo-format file asked after the
conversation's last turn, the window each policy would send, and reports per
policy and budget: recall (share of the question's evidence turns in the
window), stale (share of its superseded evidence turns), and the mean prompt
tokens. It then replays each conversation's turns in order, each user turn an
ask over the history before it, and reports cached_share (tokens of the
longest common prefix, in whole messages, of a turn's window and the previous
window followed by the previous answer, over all window tokens) and
uncached_per_turn (mean window tokens minus cached). Tokens are ceil(bytes of "speaker: text" / 4). The table goes to
standard error; with --json standard output holds only a JSON array.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true, // a failed run is not a usage mistake
		RunE: func(cmd *cobra.Command, _ []string) error {
			bs, err := recallBudgets(budgets)
			if err != nil {
				return err
			}
			ps, err := recall.ParsePolicies(policies)
			if err != nil {
				return err
			}
			return recall.Run{Format: format, Data: data, Seeds: seeds, Turns: genTurns, Family: family, JSON: asJSON,
				Options: recall.Options{
					Policies: ps, Budgets: bs, NoReplay: noReplay,
					Settings: window.Settings{Packets: packets, PacketShare: share, PacketCap: cap, StatementCap: stmtCap, Low: low, MessageShare: msgShare},
				}}.Do(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "LoCoMo-format JSON file")
	cmd.Flags().StringVar(&format, "format", "locomo", "data format: locomo (--data FILE), or generated (a synthetic club conversation per --seed, no file)")
	cmd.Flags().Int64SliceVar(&seeds, "seed", []int64{1}, "--format generated: seeds, one conversation each")
	cmd.Flags().StringVar(&family, "family", recall.FamilyTeam, "--format generated: update phrasings: team (the team's own), independent (written apart from the window's rules) or unrestated (never naming the value replaced, with distractors)")
	cmd.Flags().IntVar(&genTurns, "turns", 6000, "--format generated: turns per conversation")
	cmd.Flags().StringSliceVar(&budgets, "budget", nil, "window budget in tokens (repeatable, or comma-separated)")
	cmd.Flags().StringSliceVar(&policies, "policies", nil, "policies to evaluate (default sliding,sink,bm25,memory; also full); bm25 is the bench's reference: recency for half the budget, a plain BM25 packet for the other half")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array to standard output")
	cmd.Flags().Float64Var(&low, "low", 0, "low water mark as a share of the budget: a step evicts down to it (default 0.5)")
	cmd.Flags().BoolVar(&noReplay, "no-replay", false, "skip the turn-by-turn replay (cached_share and uncached_per_turn stay 0)")
	cmd.Flags().StringVar(&packets, "packets", "", "memory: where packets live, ask (default: only on the latest ask) or ledger (one per ask until the next step)")
	cmd.Flags().Float64Var(&share, "packet-share", 0, "memory: share of the budget the replay reserves per packet (default 1/16)")
	cmd.Flags().Float64Var(&cap, "packet-cap", 0, "memory, --packets ask: share of the budget the packet of a question may take (default 1/4)")
	cmd.Flags().Float64Var(&msgShare, "message-share", 0, "sink, memory: share of the budget a long message's excerpt takes once a step has passed it (default low/4)")
	cmd.Flags().Float64Var(&stmtCap, "statement-cap", 0, "memory, --packets ask: share of the budget the packet of an ask that is not a question may take (default 1/16)")
	_ = cmd.MarkFlagRequired("budget")
	return cmd
}

func recallBudgets(vals []string) ([]int, error) {
	var out []int
	for _, v := range vals {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--budget %q: want a positive number of tokens", v)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--budget is required")
	}
	return out, nil
}
