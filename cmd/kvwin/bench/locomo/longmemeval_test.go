package locomo

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestFromLongMemEval: each instance becomes a sample whose sessions keep
// the haystack's turns in order and whose question's evidence names the
// turns marked has_answer; Read reads the result back.
func TestFromLongMemEval(t *testing.T) {
	in := `[{"question_id":"q1","question_type":"knowledge-update","question":"Where do I live now?","answer":"Porto",
	  "haystack_dates":["2023/05/01 (Mon) 10:00","2023/06/01 (Thu) 10:00"],
	  "haystack_sessions":[
	    [{"role":"user","content":"I live in Lisbon.","has_answer":true},{"role":"assistant","content":"Nice."}],
	    [{"role":"user","content":"Tell me about trains."},{"role":"assistant","content":"Sure."},
	     {"role":"user","content":"I moved to Porto last week.","has_answer":true}]]},
	 {"question_id":"q2_abs","question_type":"single-session-user","questions":["What is my cat called?"],
	  "haystack_sessions":[[{"role":"user","content":"Hello."}]]}]`
	raw, err := FromLongMemEval(strings.NewReader(in))
	if err != nil || len(raw) != 2 {
		t.Fatalf("%d samples, %v", len(raw), err)
	}
	parts := make([][]byte, len(raw))
	for i, r := range raw {
		parts[i] = r
	}
	samples, err := Read(bytes.NewReader(append(append([]byte("["), bytes.Join(parts, []byte(","))...), ']')))
	if err != nil {
		t.Fatal(err)
	}
	s := samples[0]
	var texts []string
	for _, tr := range s.Turns {
		texts = append(texts, tr.Speaker+"|"+tr.DiaID+"|"+tr.Text)
	}
	want := []string{"user|D1:1|I live in Lisbon.", "assistant|D1:2|Nice.", "user|D2:1|Tell me about trains.",
		"assistant|D2:2|Sure.", "user|D2:3|I moved to Porto last week."}
	if !reflect.DeepEqual(texts, want) || s.SpeakerA != "user" || s.ID != "q1" {
		t.Fatalf("sample %q (%s/%s): %q", s.ID, s.SpeakerA, s.SpeakerB, texts)
	}
	if len(s.QA) != 1 || !reflect.DeepEqual(s.QA[0].Evidence, []string{"D1:1", "D2:3"}) || s.QA[0].Category != 4 {
		t.Fatalf("qa %+v", s.QA)
	}
	if q := samples[1].QA[0]; q.Question != "What is my cat called?" || q.Category != 5 || len(q.Evidence) != 0 {
		t.Fatalf("abstention qa %+v", q)
	}
	if _, err := FromLongMemEval(strings.NewReader(`{"not":"an array"}`)); err == nil {
		t.Fatal("an object was accepted")
	}
	if _, err := FromLongMemEval(strings.NewReader(`[{"question_id":"x"}]`)); err == nil {
		t.Fatal("an instance without sessions was accepted")
	}
	var v any
	if json.Unmarshal(raw[0], &v) != nil {
		t.Fatal("not JSON")
	}
}
