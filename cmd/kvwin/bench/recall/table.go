package recall

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes rows as an aligned table, shares in percent.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tbudget\trecall\tstale\tprompt tokens\tcached share\tuncached/turn\tquestions\tfailed\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.1f%%\t%.0f\t%.1f%%\t%.0f\t%d\t%d\t\n",
			r.Policy, r.Budget, 100*r.Recall, 100*r.Stale, r.PromptTokens, 100*r.CachedShare, r.UncachedPerTurn, r.Questions, r.Failed)
	}
	return tw.Flush()
}
