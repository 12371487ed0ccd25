package ttft

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and two policies:\n%s", len(lines), buf.String())
	}
	tests := []struct {
		line int
		want []string
	}{
		{0, []string{"policy", "evictions", "plateau", "cached", "TTFT p50 ms", "TTFT p90 ms", "fit c0 ms"}},
		// 30 turns, 1 eviction, cached share 150·29 / Σ(201..229) = 0.3 → 20.0%… (see sampleReport)
		{1, []string{"sink", " 30 ", " 1 ", "%"}},
		// One counted turn: no plateau, no fit.
		{2, []string{"full-nocache", " 2 ", " - "}},
	}
	for _, tt := range tests {
		for _, w := range tt.want {
			if !strings.Contains(lines[tt.line], w) {
				t.Errorf("line %d %q lacks %q", tt.line, lines[tt.line], w)
			}
		}
	}
}

// A policy with Server-Timing phases gets a line of them under the table,
// in the phases' order, outside last.
func TestWriteTableLatePhases(t *testing.T) {
	r := sampleReport()
	r.Policies[0].LatePhases = map[string]float64{"total": 9, "window": 0.25, "read": 0.125, "outside": 0.5}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 6 || lines[5] != "      sink | read 0.12 window 0.25 total 9.00 outside 0.50" {
		t.Fatalf("table:\n%s", buf.String())
	}
}

func TestWriteCachedShares(t *testing.T) {
	turns := ramp(12, func(int) float64 { return 1 })
	for i := range turns {
		turns[i].PromptTokens, turns[i].CachedTokens = 100, max(0, 100-10*i)
	}
	turns[7].Evicted = true
	var buf bytes.Buffer
	if err := WriteCachedShares(&buf, PolicyResult{Policy: Sliding, Turns: turns}, 650); err != nil {
		t.Fatal(err)
	}
	want := "sliding: cached share per turn (cached ÷ prompt tokens; * eviction step; | history first exceeds the budget of 650)\n" +
		"  turns    1–10   1.00  0.90  0.80  0.70  0.60  0.50 |0.40  0.30* 0.20  0.10 \n" +
		"  turns   11–12   0.00  0.00 \n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	pr := NewProgress(&buf) // not a terminal: a line per turn
	pr.Turn(Sink, TurnResult{Turn: 3, HistoryTokens: 300, PromptTokens: 200, CachedTokens: 150, TTFTMs: 12.5, Step: 1}, 120)
	pr.Done()
	if got := buf.String(); !strings.HasPrefix(got, "sink         turn   3/120  history   300") || strings.Count(got, "\n") != 1 || strings.Contains(got, "\r") {
		t.Fatalf("progress line %q", got)
	}
	term := &Progress{w: &buf, terminal: true}
	buf.Reset()
	term.Turn(Full, TurnResult{Turn: 1}, 2)
	term.Turn(Full, TurnResult{Turn: 2}, 2)
	term.Done()
	if got := buf.String(); strings.Count(got, "\r\x1b[K") != 2 || strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") {
		t.Fatalf("terminal progress %q", got)
	}
}
