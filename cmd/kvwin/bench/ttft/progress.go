package ttft

import (
	"fmt"
	"io"
	"os"
)

// Progress reports a run's turns as they are measured: on a terminal one
// line rewritten in place, elsewhere (a log, CI) one line per turn. It is
// used by one goroutine at a time.
type Progress struct {
	w        io.Writer
	terminal bool
	dirty    bool // a rewritten line is on screen
}

// NewProgress returns a Progress writing to w, rewriting its line in place
// if w is a terminal.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, terminal: isTerminal(w)}
}

// Turn reports one measured turn of policy p out of turns.
func (pr *Progress) Turn(p Policy, t TurnResult, turns int) {
	share := 0.0
	if t.PromptTokens > 0 {
		share = float64(t.CachedTokens) / float64(t.PromptTokens)
	}
	line := fmt.Sprintf("%-12s turn %3d/%d  history %5d  prompt %5d  cached %3.0f%%  TTFT %8.1f ms  prompt %8.1f ms  steps %d",
		p, t.Turn, turns, t.HistoryTokens, t.PromptTokens, 100*share, t.TTFTMs, t.PromptMs, t.Step)
	if pr.terminal {
		fmt.Fprintf(pr.w, "\r\x1b[K%s", line) // carriage return, erase the line
		pr.dirty = true
		return
	}
	fmt.Fprintln(pr.w, line)
}

// Done ends the rewritten line, if any, so what follows starts on a line
// of its own.
func (pr *Progress) Done() {
	if pr.dirty {
		fmt.Fprintln(pr.w)
		pr.dirty = false
	}
}

// isTerminal reports whether w is a character device, without a
// dependency: a terminal is the only character device a user reads.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
