package recall

import (
	"context"
	"os"
	"strings"
	"testing"

	"kvwin/window"
)

func loadTiny(t *testing.T) Conversation {
	t.Helper()
	f, err := os.Open("testdata/tiny-locomo.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	convs, err := LoadLoCoMo(f)
	if err != nil || len(convs) != 1 {
		t.Fatalf("LoadLoCoMo: %d conversations, %v", len(convs), err)
	}
	return convs[0]
}

func TestLoadLoCoMo(t *testing.T) {
	c := loadTiny(t)
	if c.SpeakerA != "Ana" || c.SpeakerB != "Bot" {
		t.Fatalf("speakers %q %q", c.SpeakerA, c.SpeakerB)
	}
	// The empty turn D2:7 is dropped; session 10 follows session 2.
	if len(c.Turns) != 42 || c.Turns[28].DiaID != "D10:1" {
		t.Fatalf("%d turns, turn 14 = %q; want 42 with D10:1 after session 2", len(c.Turns), c.Turns[14].DiaID)
	}
	// Category 5 and the unresolvable question are skipped.
	if len(c.Questions) != 3 || c.Skipped != 2 {
		t.Fatalf("%d questions, %d skipped; want 3 and 2", len(c.Questions), c.Skipped)
	}
	tests := []struct {
		q        int
		evidence []string
		stale    []string
	}{
		{0, []string{"D2:1"}, []string{"D1:3"}},
		{1, []string{"D2:3"}, []string{"D1:7"}},
		{2, []string{"D1:13", "D1:14"}, nil},
	}
	for _, tc := range tests {
		q := c.Questions[tc.q]
		if ids(c, q.Evidence) != strings.Join(tc.evidence, ",") || ids(c, q.Stale) != strings.Join(tc.stale, ",") {
			t.Errorf("question %d: evidence %s stale %s; want %v %v", tc.q, ids(c, q.Evidence), ids(c, q.Stale), tc.evidence, tc.stale)
		}
	}
}

func ids(c Conversation, idx []int) string {
	var out []string
	for _, i := range idx {
		out = append(out, c.Turns[i].DiaID)
	}
	return strings.Join(out, ",")
}

func TestEvaluateTiny(t *testing.T) {
	c := loadTiny(t)
	rows, err := Evaluate(context.Background(), []Conversation{c}, Options{
		Policies: []string{"full", "sliding", "sink", "memory"}, Budgets: []int{160, 10000},
		// A quarter of a small budget per ask, so a packet line fits.
		Settings: window.Settings{PacketShare: 0.25}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, r := range rows {
		got[r.Policy+"/"+itoa(r.Budget)] = r
	}
	tests := []struct {
		key           string
		recall, stale float64
		failed        int
	}{
		{"full/10000", 1, 1, 0}, // everything, stale included
		{"full/160", 0, 0, 3},   // cannot fit
		{"sink/160", 0, 0, 0},   // recency only: the facts are evicted
		// Packets bring the current facts, not the stale ones; the
		// acknowledgement after Lena's fact (half her evidence) is left out.
		{"memory/160", 2.5 / 3, 0, 0},
		{"memory/10000", 1, 1, 0}, // small enough to send whole
	}
	for _, tc := range tests {
		r, ok := got[tc.key]
		if !ok {
			t.Fatalf("no row %s in %+v", tc.key, rows)
		}
		if r.Recall != tc.recall || r.Stale != tc.stale || r.Failed != tc.failed || r.Questions != 3 || r.StaleQuestions != 2 {
			t.Errorf("%s: recall %.2f stale %.2f failed %d (questions %d/%d); want %.2f %.2f %d",
				tc.key, r.Recall, r.Stale, r.Failed, r.Questions, r.StaleQuestions, tc.recall, tc.stale, tc.failed)
		}
		if tc.failed == 0 && (r.PromptTokens <= 0 || (tc.key != "full/10000" && tc.key != "memory/10000" && r.PromptTokens > 160)) {
			t.Errorf("%s: prompt tokens %.1f", tc.key, r.PromptTokens)
		}
	}
	var sb strings.Builder
	if err := WriteTable(&sb, rows); err != nil || !strings.Contains(sb.String(), "memory") {
		t.Errorf("table: %v\n%s", err, sb.String())
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}
