package locomo

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	const sample = `{"sample_id": "s1",
	  "conversation": {"speaker_a": "Ana", "speaker_b": "Ben",
	    "session_10": [{"speaker": "Ana", "dia_id": "D10:1", "text": "ten"}],
	    "session_10_date_time": "later",
	    "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "two"}, {"speaker": "Ana", "dia_id": "D2:2", "text": " "}],
	    "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "one"}]},
	  "qa": [{"question": "q?", "category": 2, "evidence": ["D1:1; D2:1"], "stale_evidence": "D:10:1"},
	         {"question": "r?", "category": 5, "evidence": 7}]}`
	want := Sample{ID: "s1", SpeakerA: "Ana", SpeakerB: "Ben",
		// Numeric session order; the blank turn is kept (a bench decides).
		Turns: []Turn{{"Ana", "D1:1", "one"}, {"Ben", "D2:1", "two"}, {"Ana", "D2:2", " "}, {"Ana", "D10:1", "ten"}},
		QA: []QA{{Question: "q?", Category: 2, Evidence: []string{"D1:1", "D2:1"}, Stale: []string{"D:10:1"}},
			{Question: "r?", Category: 5}}}
	tests := []struct {
		name    string
		in      string
		want    []Sample
		wantErr error // nil: no error; errAny: any error
	}{
		{"one sample", sample, []Sample{want}, nil},
		{"array", "[" + sample + "," + sample + "]", []Sample{want, want}, nil},
		{"empty array", "[]", []Sample{}, nil},
		{"no speakers", `[{"conversation": {"session_1": [{"speaker": "X", "text": "hi"}]}}]`,
			[]Sample{{Turns: []Turn{{Speaker: "X", Text: "hi"}}}}, nil},
		{"not a sample", `{"foo": 1}`, nil, ErrDecode},
		{"not json", `nope`, nil, ErrDecode},
		{"bad session", `[{"conversation": {"session_1": "text"}}]`, nil, errAny},
		{"bad speaker", `[{"conversation": {"speaker_a": 3}}]`, nil, errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tt.in))
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Read: %v", err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("Read: error %v; want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Read:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestNormalID(t *testing.T) {
	for in, want := range map[string]string{"D:11:26": "D11:26", "D30:05": "D30:5", "D1:3": "D1:3", " D07:010 ": "D7:10", "S1:2": "", "D1": ""} {
		got, ok := NormalID(in)
		if got != want || ok != (want != "") {
			t.Errorf("NormalID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestEvidenceIDs(t *testing.T) {
	tests := []struct{ in, want string }{
		{`["D1:1; D1:2,D1:3 D1:4"]`, "D1:1|D1:2|D1:3|D1:4"},
		{`"D2:1;D2:2"`, "D2:1|D2:2"},
		{`["D3:1", "D3:2\tD3:3"]`, "D3:1|D3:2|D3:3"},
		{`7`, ""},
		{``, ""},
	}
	for _, tt := range tests {
		if got := strings.Join(EvidenceIDs([]byte(tt.in)), "|"); got != tt.want {
			t.Errorf("EvidenceIDs(%s) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
