package ttft

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestLoaders(t *testing.T) {
	tests := []struct {
		file string
		load func(*os.File) (Conversation, error)
		want Conversation
	}{
		{"testdata/locomo.json", func(f *os.File) (Conversation, error) { return LoadLoCoMo(f) }, Conversation{Turns: []Turn{
			// Sessions in numeric order (1, 2, 10); Ben's first message of
			// session 2 joins his reply; Ana's three asks in a row (Ben's
			// blank turn is skipped) are one ask.
			{"Hi Ben, I am planning a trip.", "Where to?\nDid you book it?"},
			{"Yes, Lisbon.\nIn June.\nBack from the trip.", "Welcome back!"},
			// Ana's unanswered last ask of sample 1 is dropped; sample 2
			// has no speaker_a, so its first speaker is the user.
			{"Second sample, first speaker is the user.", "Understood."},
			{"Last ask without a reply.", ""},
		}}},
		{"testdata/sharegpt.json", func(f *os.File) (Conversation, error) { return LoadShareGPT(f) }, Conversation{
			System: "You are terse.",
			Turns: []Turn{
				{"What is a KV cache?", "Stored keys and values."},
				{"Why keep it?", "To skip recomputing the prefix."},
				// The second chat's leading reply and late system prompt
				// are dropped; its two asks in a row are one.
				{"New chat.\nTwo messages in a row.", "Joined into one ask."},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := tt.load(f)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestLoadersReject(t *testing.T) {
	tests := []struct {
		name, input string
		load        func(string) error
		want        string
		is          error
	}{
		{"sharegpt unknown from", `[{"id": "x", "conversations": [{"from": "robot", "value": "hi"}]}]`, shareGPT, `unknown "from" "robot"`, nil},
		{"sharegpt not an array", `{"conversations": []}`, shareGPT, "decode sharegpt", nil},
		{"sharegpt no ask", `[{"conversations": [{"from": "gpt", "value": "hi"}]}]`, shareGPT, "", ErrNoTurns},
		{"locomo not json", `nope`, loCoMo, "decode locomo", nil},
		{"locomo bad session", `{"conversation": {"session_1": "text"}}`, loCoMo, "session_1", nil},
		{"locomo no turns", `[{"conversation": {"speaker_a": "A", "session_1": []}}]`, loCoMo, "", ErrNoTurns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load(tt.input)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func shareGPT(s string) error { _, err := LoadShareGPT(strings.NewReader(s)); return err }
func loCoMo(s string) error   { _, err := LoadLoCoMo(strings.NewReader(s)); return err }
