package llamaserver

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"kvwin/engine"
)

// TestReadSlots: what each shape of /slots says a slot holds: a prompt's
// text tokenized (BOS once), a count, nothing; /slots not served is
// engine.ErrNotSupported.
func TestReadSlots(t *testing.T) {
	hello := encode(chatML(chatMsgs...), true, true, true)
	tests := []struct {
		name    string
		fixture string
		want    []engine.SlotContent
		tokens  []int // engine.SlotState.Tokens of Slots
		err     error
	}{
		{"prompt text (older builds)", "slots_prompt_shape.json", []engine.SlotContent{
			{ID: 0, Tokens: hello, Count: len(hello)}, {ID: 1, Tokens: []int{}, Count: 0}, {ID: 2, Processing: true, Count: -1},
		}, []int{len(hello), 0, 0}, nil},
		{"counts (newer builds)", "slots_counts_shape.json", []engine.SlotContent{
			{ID: 0, Count: 1093}, {ID: 1, Count: 0}, // a slot that served nothing
		}, []int{1093, 0}, nil},
		{"not served", "501", nil, nil, engine.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{slots: tt.fixture})
			b := f.backend(t, Config{})
			got, err := b.ReadSlots(context.Background())
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadSlots =\n %+v\nwant\n %+v", got, tt.want)
			}
			for i, s := range b.Slots() {
				if s.Tokens != tt.tokens[i] {
					t.Errorf("slot %d: Tokens %d, want %d", i, s.Tokens, tt.tokens[i])
				}
			}
			// A second read of the same prompts asks /tokenize nothing more.
			n := len(f.requests("/tokenize"))
			if _, err := b.ReadSlots(context.Background()); err != nil {
				t.Fatal(err)
			}
			if m := len(f.requests("/tokenize")); m != n {
				t.Errorf("the second read tokenized %d more times", m-n)
			}
		})
	}
}
