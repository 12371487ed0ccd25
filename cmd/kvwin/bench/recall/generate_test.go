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

// TestGenerateUnrestated: every update of the unrestated family names its
// new value and no other value of any attribute, so the value it replaces
// is never restated; and the family has its distractors.
func TestGenerateUnrestated(t *testing.T) {
	var values []string
	for _, a := range genAttrs {
		values = append(values, a.values...)
	}
	for _, seed := range []int64{1, 2, 3} {
		c := GenerateFamily(FamilyUnrestated, seed, 3000)
		updates := 0
		for _, q := range c.Questions {
			if len(q.Stale) == 0 {
				continue
			}
			updates++
			text := c.Turns[q.Evidence[0]].Text
			named := 0
			for _, v := range values {
				if strings.Contains(text, v) {
					named++
				}
			}
			if named != 1 || strings.Contains(text, "{") {
				t.Fatalf("seed %d: update %q names %d values, want its new one only", seed, text, named)
			}
		}
		if updates < 10 {
			t.Fatalf("seed %d: %d updates, want at least 10", seed, updates)
		}
		distractors := 0
		for _, turn := range c.Turns {
			if strings.Contains(turn.Text, "nothing is decided") || strings.Contains(turn.Text, "asking for a friend") {
				distractors++
			}
		}
		if distractors == 0 {
			t.Fatalf("seed %d: no distractors", seed)
		}
	}
}
