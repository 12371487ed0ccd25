package locomo

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

const textingFixture = `[{"sample_id":"s1","conversation":{"speaker_a":"Ana","speaker_b":"Ben",
"session_1":[{"speaker":"Ana","dia_id":"D1:1","text":"Hi Ben! How are you? I adopted a puppy yesterday."},
{"speaker":"Ben","dia_id":"D1:2","text":"That is wonderful news, really."}],
"session_2":[{"speaker":"Ana","dia_id":"D2:1","text":"The puppy is called Biscuit."}]},
"qa":[{"question":"When did Ana adopt a puppy?","evidence":["D1:1"],"category":2},
{"question":"What is the puppy called?","evidence":"D2:1; D1:2","stale_evidence":["D1:2"],"category":1}]}]`

// TestTexting: each sentence becomes a message of its own, numbered anew
// in its session, evidence and stale evidence follow the turn to all its
// messages, questions stay as written, the text is lower case, a seed
// gives the same file every time, and the file reads back unchanged.
func TestTexting(t *testing.T) {
	in, err := Read(strings.NewReader(textingFixture))
	if err != nil {
		t.Fatal(err)
	}
	out := Texting(in, 1)
	s := out[0]
	var ids []string
	for _, turn := range s.Turns {
		ids = append(ids, turn.Speaker+" "+turn.DiaID)
		if turn.Text == "" || strings.ToLower(turn.Text) != turn.Text {
			t.Errorf("%s: %q: want lower case, not empty", turn.DiaID, turn.Text)
		}
		if strings.ContainsFunc(turn.Text, func(r rune) bool { return r == '.' || r == '!' }) {
			t.Errorf("%s: %q: end punctuation kept", turn.DiaID, turn.Text)
		}
	}
	want := []string{"Ana D1:1", "Ana D1:2", "Ana D1:3", "Ben D1:4", "Ana D2:1"}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("messages %v, want %v", ids, want)
	}
	if !strings.Contains(s.Turns[2].Text, "pupp") || !strings.Contains(s.Turns[4].Text, "biscuit") {
		t.Errorf("sentences out of place: %q, %q", s.Turns[2].Text, s.Turns[4].Text)
	}
	if q := s.QA[0]; q.Question != in[0].QA[0].Question || !reflect.DeepEqual(q.Evidence, []string{"D1:1", "D1:2", "D1:3"}) {
		t.Errorf("question 1: %q, evidence %v", q.Question, q.Evidence)
	}
	if q := s.QA[1]; !reflect.DeepEqual(q.Evidence, []string{"D2:1", "D1:4"}) || !reflect.DeepEqual(q.Stale, []string{"D1:4"}) {
		t.Errorf("question 2: evidence %v, stale %v", q.Evidence, q.Stale)
	}
	if again := Texting(in, 1); !reflect.DeepEqual(again, out) {
		t.Errorf("seed 1 twice: %v and %v", out, again)
	}
	data, err := Write(out)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, out) {
		t.Errorf("read back %v, want %v", back, out)
	}
}

// TestTextingRestyles: over many words, some get texting spellings and
// typos and some messages an emoji or interjection, at about the stated
// rates, and seeds differ.
func TestTextingRestyles(t *testing.T) {
	var turns []Turn
	for i := range 400 {
		turns = append(turns, Turn{Speaker: "A", DiaID: "D1:" + string(rune('0'+i%10)), Text: "Thanks, you are really great with the garden tomatoes."})
	}
	in := []Sample{{ID: "x", Turns: turns}}
	a, b := Texting(in, 1), Texting(in, 2)
	if reflect.DeepEqual(a, b) {
		t.Error("seeds 1 and 2 give the same file")
	}
	spelled, typos, tails := 0, 0, 0
	for _, turn := range a[0].Turns {
		words := strings.Fields(turn.Text)
		for _, w := range words {
			switch strings.TrimRight(w, ".,!?") {
			case "thx", "u", "r", "rly", "gr8":
				spelled++
			case "thanks", "you", "are", "really", "great", "with", "the", "garden", "tomatoes", "lol", "haha", "omg", "lmao":
			default:
				if len(w) > 2 && w[0] >= 'a' && w[0] <= 'z' {
					typos++
				}
			}
		}
		if last := words[len(words)-1]; !strings.HasPrefix(last, "tomato") && !strings.HasPrefix(last, "tomaot") && !strings.HasPrefix(last, "tomto") {
			tails++
		}
	}
	// 400 messages of 5 spellable words (half spelled) and 3 words of
	// four letters or more (7% with a typo); a quarter with a tail.
	if spelled < 800 || spelled > 1200 {
		t.Errorf("%d texting spellings of 2,000 chances, want about 1,000", spelled)
	}
	if typos < 40 || typos > 130 {
		t.Errorf("%d typos of 1,200 chances, want about 84", typos)
	}
	if tails < 60 || tails > 150 {
		t.Errorf("%d tails of 400 messages, want about 100", tails)
	}
}
