package recall

import (
	"fmt"
	"io"
	"text/tabwriter"

	"kvwin/window"
	"kvwin/window/memory"
)

// WriteTable writes rows as an aligned table, shares in percent.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tbudget\trecall\tstale\tprompt tokens\tcached share\tuncached/turn\tquestions\tfailed\twith passages\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%.0f\t%.1f%%\t%.0f\t%d\t%d\t%.1f%%\t\n",
			r.Policy, r.Budget, 100*r.Recall, 100*r.Stale, r.PromptTokens, 100*r.CachedShare, r.UncachedPerTurn, r.Questions, r.Failed, 100*r.PassageRecall)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeLost(w, rows)
}

// lostKinds are the reasons a missed evidence turn is reported under, in
// the order of the table's columns.
var lostKinds = []memory.Miss{memory.MissNotRetrieved, memory.MissGated, memory.MissCut, memory.MissStale, memory.MissDuplicate, memory.MissNotHeld, memory.MissNone}

// writeLost writes, for the rows that explain their misses (memory), the
// recall lost by kind, in points: the columns sum to 100 − recall. "hit"
// counts evidence the search returned but the window did not carry whole
// (a passage of it).
func writeLost(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, r := range rows {
		if r.Policy != window.PolicyMemory {
			continue
		}
		if !header {
			fmt.Fprintf(tw, "recall lost (points)\tbudget\t")
			for _, k := range lostKinds {
				fmt.Fprintf(tw, "%s\t", k)
			}
			fmt.Fprintf(tw, "\n")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%d\t", r.Policy, r.Budget)
		for _, k := range lostKinds {
			fmt.Fprintf(tw, "%.1f\t", 100*r.Lost[k])
		}
		fmt.Fprintf(tw, "\n")
	}
	return tw.Flush()
}
