package ttft

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"kvwin/cmd/kvwin/bench/chat"
)

// WriteTable prints the summary of a run, one row per policy: measured
// turns, eviction steps, plateau ratio, TTFT over the server's prompt time
// late in the run (PromptRatio), cached share, TTFT p50 and p90
// (turn 1 excluded, as in Summarize) and the fit of the prefill times,
// c0 in ms, a in µs per new token, b in ns per new token per attended
// token. Undefined figures print as "-".
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tturns\tevictions\tplateau\tTTFT÷prompt\tcached\tTTFT p50 ms\tTTFT p90 ms\tfit c0 ms\ta µs/tok\tb ns/tok²\t")
	for _, p := range r.Policies {
		plateau, overPrompt := "-", "-"
		if p.PlateauRatio != nil {
			plateau = fmt.Sprintf("%.2f", *p.PlateauRatio)
		}
		if p.PromptRatio != nil {
			overPrompt = fmt.Sprintf("%.2f", *p.PromptRatio)
		}
		fit := "-\t-\t-"
		if p.Fit != nil {
			fit = fmt.Sprintf("%.1f\t%.1f\t%.3f", p.Fit.C0*1e3, p.Fit.A*1e6, p.Fit.B*1e9)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t\n", p.label(), len(p.Turns), p.Evictions, plateau, overPrompt,
			100*p.CachedShare, num(TTFTQuantile(p.Turns, 0.5)), num(TTFTQuantile(p.Turns, 0.9)), fit)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeLatePhases(w, r)
}

// writeLatePhases prints each policy's LatePhases, one line each, under a
// heading; nothing when no policy has them.
func writeLatePhases(w io.Writer, r Report) error {
	var b strings.Builder
	for _, p := range r.Policies {
		if len(p.LatePhases) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nTTFT÷prompt's turns, median ms by Server-Timing phase (outside: TTFT − total, the client's and the connection's share):\n")
		}
		fmt.Fprintf(&b, "%10s%s", p.label(), chat.PhaseText(p.LatePhases))
		if d, ok := p.LatePhases["outside"]; ok {
			fmt.Fprintf(&b, " outside %.2f", d)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCachedShares prints one policy's cached share per turn (cached ÷
// prompt tokens), ten turns to a row, with a "*" after each turn at which
// an eviction step happened and a "|" before the first turn whose history
// exceeds budget. It is how sliding's collapse is seen: its share stays
// near 1 while the conversation fits, and falls once every turn drops the
// oldest turn and with it the cached prefix.
func WriteCachedShares(w io.Writer, p PolicyResult, budget int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: cached share per turn (cached ÷ prompt tokens; * eviction step; | history first exceeds the budget of %d)\n", p.Policy, budget)
	crossed := false
	for i, t := range p.Turns {
		if i%10 == 0 {
			if i > 0 {
				b.WriteByte('\n')
			}
			last := p.Turns[min(i+9, len(p.Turns)-1)].Turn
			fmt.Fprintf(&b, "  turns %4d–%-4d", t.Turn, last)
		}
		sep := " "
		if !crossed && t.HistoryTokens > budget {
			crossed, sep = true, "|"
		}
		share := 0.0
		if t.PromptTokens > 0 {
			share = float64(t.CachedTokens) / float64(t.PromptTokens)
		}
		mark := " "
		if t.Evicted {
			mark = "*"
		}
		fmt.Fprintf(&b, "%s%.2f%s", sep, share, mark)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}
