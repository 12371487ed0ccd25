package enginetest

import (
	"context"
	"errors"
	"testing"

	"kvwin/engine"
)

// The fakes pass the suite themselves: a plain Backend, and Full with
// every ability.
func TestFakesConform(t *testing.T) {
	info := engine.Info{Name: "fake-0", Model: "tiny", ContextSlot: 1024, Slots: 2}
	t.Run("Backend", func(t *testing.T) {
		Run(t, func(t *testing.T) engine.Backend { return New(info) }, Options{Caches: true})
	})
	t.Run("Full", func(t *testing.T) {
		Run(t, func(t *testing.T) engine.Backend { return NewFull(New(info)) }, Options{Caches: true})
	})
}

// TestScript checks the scripted behaviours tests rely on.
func TestScript(t *testing.T) {
	boom := errors.New("boom")
	first := engine.Event{First: true, Timings: engine.Timings{PromptTokens: 5, CachedTokens: 2}}
	for _, c := range []struct {
		name    string
		setup   func(b *Backend)
		events  int
		wantErr error
		text    string
	}{
		{"script", func(b *Backend) {
			b.Script(engine.FinishStop, engine.Timings{PromptTokens: 5}, first, engine.Event{Text: "a"}, engine.Event{Text: "b"})
		}, 3, nil, "ab"},
		{"error before", func(b *Backend) { b.Err = boom }, 0, boom, ""},
		{"error after", func(b *Backend) {
			b.Script(engine.FinishStop, engine.Timings{}, first, engine.Event{Text: "a"})
			b.ErrAfter = boom
		}, 2, boom, ""},
		{"unscripted", func(b *Backend) { b.Reply = "one two three" }, 3, nil, "one two three"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := New(engine.Info{Name: "f"})
			c.setup(b)
			var n int
			res, err := b.Generate(context.Background(), engine.Request{Prompt: "hi"}, func(engine.Event) error { n++; return nil })
			if !errors.Is(err, c.wantErr) || n != c.events || res.Text != c.text {
				t.Fatalf("Generate = %q, %v after %d events; want %q, %v after %d", res.Text, err, n, c.text, c.wantErr, c.events)
			}
			if got := b.Requests(); len(got) != 1 || got[0].Prompt != "hi" {
				t.Fatalf("requests recorded: %+v", got)
			}
		})
	}
}

// TestBlockEndsWithTheContext checks Block, Cancelled and LateErr.
func TestBlockEndsWithTheContext(t *testing.T) {
	b := New(engine.Info{Name: "f"}).Script(engine.FinishStop, engine.Timings{}, engine.Event{First: true})
	b.Block, b.LateErr = true, make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done, streamed := make(chan error, 1), make(chan struct{})
	go func() {
		_, err := b.Generate(ctx, engine.Request{Prompt: "x"}, func(ev engine.Event) error {
			if ev.First {
				close(streamed)
			}
			if ev.Text == "late" {
				return errors.New("late")
			}
			return nil
		})
		done <- err
	}()
	// Cancelled once the script has played, so Generate is where Block
	// waits: a cancel right after Started could end it at its first check
	// of the context, before Block, and LateErr would never be sent.
	<-streamed
	cancel()
	<-b.Cancelled
	if err := <-b.LateErr; err == nil || err.Error() != "late" {
		t.Fatalf("late stream call returned %v", err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate = %v, want context.Canceled", err)
	}
}

// TestAbilitiesRecordTheirCalls checks the call log and the vocabulary.
func TestAbilitiesRecordTheirCalls(t *testing.T) {
	f := NewFull(New(engine.Info{Name: "f", Slots: 1, ContextSlot: 64}))
	ids, _ := f.Tokenize(context.Background(), "<|im_start|>a", true)
	if want := []int{BOS, ImStart, ByteBase + 'a'}; len(ids) != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Fatalf("Tokenize = %v, want %v", ids, want)
	}
	f.Slots()
	if got := f.Calls(); len(got) != 2 || got[0] != "Tokenize" || got[1] != "Slots" {
		t.Fatalf("Calls = %v", got)
	}
}
