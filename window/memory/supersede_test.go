package memory

import (
	"fmt"
	"testing"
)

// TestUpdateByValue: a later turn about the same subject that names the
// value an earlier statement gave it supersedes that statement, however
// it is worded (no frame, no change verb, the new value said nowhere
// else, the values in two sentences); a question that names the value
// does not, nor does a turn about someone else.
func TestUpdateByValue(t *testing.T) {
	var texts []string
	for i := 0; i < 30; i++ {
		texts = append(texts, fmt.Sprintf("Routine check %d passed.", i), "Okay.")
	}
	texts[4] = "Omar plays the banjo in the evening band."
	texts[8] = "Sofia plays the trombone in the evening band."
	texts[12] = "Kenji plays the banjo in the evening band."
	texts[20] = "I had coffee with Sofia and Kenji."
	texts[24] = "Send the agenda to Omar, please."
	old, other := 4, 12
	tests := []struct {
		name   string
		update string
		stale  bool
	}{
		{"two sentences, new value unknown", "Remember when I said Omar's instrument was the banjo? Scratch that, the harp.", true},
		{"no marker", "Omar's instrument went from the banjo to the harp last month.", true},
		{"a question states nothing", "Does Omar still have the banjo?", false},
		{"someone else", "Kenji's instrument went from the banjo to the harp last month.", false},
	}
	for _, tc := range tests {
		ts := append([]string(nil), texts...)
		ts[40] = tc.update
		x := NewIndex(chatTurns(ts...)...)
		q := Query{Ask: "Which instrument does Omar play?"}
		got := hitSet(x.Search(q))
		if got[ts[old]] == tc.stale {
			t.Errorf("%s: the old statement in the packet: %v, want %v (hits %q)", tc.name, got[ts[old]], !tc.stale, hitTexts(x.Search(q)))
		}
		if tc.stale {
			if m := x.Explain(q, []int{old + 3})[0]; m != MissStale {
				t.Errorf("%s: old statement explained as %v, want %v", tc.name, m, MissStale)
			}
		}
		// Kenji's statement is about someone else: never superseded by
		// an update about Omar.
		if kq := (Query{Ask: "Which instrument does Kenji play?"}); tc.name != "someone else" && !hitSet(x.Search(kq))[ts[other]] {
			t.Errorf("%s: Kenji's statement missing for an ask about Kenji: %q", tc.name, hitTexts(x.Search(kq)))
		}
	}
}
