package recall

import (
	"reflect"
	"strings"
	"testing"
)

// TestGenerate: the generator is deterministic by seed, differs across
// seeds, and its questions point at the statements that hold their answer:
// the evidence is the latest statement naming the person, the stale
// evidence an earlier one that the update replaced.
func TestGenerate(t *testing.T) {
	a, b := Generate(7, 3000), Generate(7, 3000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two conversations")
	}
	if c := Generate(8, 3000); reflect.DeepEqual(a.Turns, c.Turns) {
		t.Fatal("two seeds gave one conversation")
	}
	if len(a.Turns) != 3000 || len(a.Questions) < 40 {
		t.Fatalf("%d turns, %d questions; want 3000 and at least 40", len(a.Turns), len(a.Questions))
	}
	stale := 0
	for _, q := range a.Questions {
		if len(q.Evidence) != 1 {
			t.Fatalf("%q: evidence %v", q.Question, q.Evidence)
		}
		ev := a.Turns[q.Evidence[0]]
		name := strings.Fields(strings.TrimSuffix(strings.ReplaceAll(q.Question, "'s", ""), "?"))
		named := false
		for _, w := range name {
			named = named || strings.Contains(ev.Text, w) && w[0] >= 'A' && w[0] <= 'Z' && w != "What" && w != "Which" && w != "How"
		}
		if !named || ev.Speaker != a.SpeakerA {
			t.Fatalf("%q: evidence %q does not name its person", q.Question, ev.Text)
		}
		for _, s := range q.Stale {
			stale++
			if s >= q.Evidence[0] {
				t.Fatalf("%q: stale turn %d is not before the evidence %d", q.Question, s, q.Evidence[0])
			}
		}
	}
	if stale < 10 {
		t.Fatalf("only %d stale turns: updates are missing", stale)
	}
}
