package web

import (
	"context"
	"reflect"
	"testing"

	"kvwin/engine"
)

// TestNodeRoundTripLogprobs: kvwin's llama-server adapter over a kvwin
// node gets back the log-probabilities the node's backend reported, byte
// for byte, streamed with their text or ahead of it (a character split
// across tokens), and asks the node for as many alternatives as the
// request wants.
func TestNodeRoundTripLogprobs(t *testing.T) {
	lp := func(b []byte, v float32, top ...engine.TopLogprob) engine.TokenLogprob {
		return engine.TokenLogprob{Token: string(b), Bytes: b, Logprob: v, Top: top}
	}
	alt := func(b []byte, v float32) engine.TopLogprob {
		return engine.TopLogprob{Token: string(b), Bytes: b, Logprob: v}
	}
	split1 := lp([]byte{0xc3}, -0.5, alt([]byte{0xc3}, -0.5), alt([]byte("e"), -1))
	split2 := lp([]byte{0xa9}, -0.0625, alt([]byte{0xa9}, -0.0625), alt([]byte{0xa8}, -3))
	bang := lp([]byte("!"), -0.25, alt([]byte("!"), -0.25), alt([]byte("."), -2))
	all := []engine.TokenLogprob{split1, split2, bang}

	f := newFake()
	first := engine.Event{First: true, Slot: 0, Timings: engine.Timings{PromptTokens: 3}}
	f.Script(engine.FinishLength, engine.Timings{PromptTokens: 3, GeneratedTokens: 3}, first,
		engine.Event{Logprobs: all[:1]},             // the first byte of é: no text yet
		engine.Event{Text: "é!", Logprobs: all[1:]}) // the rest of é, and !
	f.Result.Logprobs = all
	b := adapterFor(t, startNode(t, f, newTokFake(f)))
	req := engine.Request{Tokens: []int{1, 2, 3}, Sampling: engine.DefaultSampling(), Slot: -1, MaxTokens: 3, Logprobs: true, TopLogprobs: 2}
	var streamed []engine.TokenLogprob
	res, err := b.Generate(context.Background(), req, func(ev engine.Event) error {
		streamed = append(streamed, ev.Logprobs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Requests()[0]; !got.Logprobs || got.TopLogprobs != 2 {
		t.Errorf("the node's backend was asked logprobs %v, top %d", got.Logprobs, got.TopLogprobs)
	}
	if res.Text != "é!" || !reflect.DeepEqual(res.Logprobs, all) || !reflect.DeepEqual(streamed, all) {
		t.Errorf("text %q\nresult   %+v\nstreamed %+v\nwant     %+v", res.Text, res.Logprobs, streamed, all)
	}
}
