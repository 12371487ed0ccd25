package llamacpp

import (
	"context"
	"slices"
	"testing"

	"kvwin/engine"

	"github.com/ollama/ollama/llama"
)

// A finished request's sampler serves the next request with the same
// parameters, reset: it draws what a new one draws (a fixed seed, every
// token sampled at temperature 1 over the whole vocabulary, a repeat
// penalty whose window it keeps), and a request with other parameters gets
// one of its own.
func TestSamplersAreKeptAndReset(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 512})
	req := func(temp float32) engine.Request {
		s := engine.DefaultSampling()
		s.Temperature, s.Seed, s.TopK, s.TopP, s.MinP = temp, 7, 0, 1, 0
		s.RepeatPenalty, s.RepeatLastN = 1.3, 64
		return engine.Request{Prompt: text(3, 60), MaxTokens: 24, Sampling: s, Slot: -1, NoCache: true}
	}
	run := func(r engine.Request) []int {
		t.Helper()
		res, err := e.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	held := func(r engine.Request) []*llama.SamplingContext {
		e.samplers.mu.Lock()
		defer e.samplers.mu.Unlock()
		var out []*llama.SamplingContext
		for _, k := range e.samplers.held {
			if k.p.Temp == r.Sampling.Temperature {
				out = append(out, k.s)
			}
		}
		return out
	}
	hot, cool := req(1), req(0.5)
	first := run(hot)
	kept := held(hot)
	if len(kept) != 1 {
		t.Fatalf("%d samplers kept after a request; want 1", len(kept))
	}
	run(cool)
	if len(held(cool)) != 1 || len(held(hot)) != 1 {
		t.Fatalf("kept %d and %d; want one per parameters", len(held(hot)), len(held(cool)))
	}
	for i := range 3 {
		again := run(hot)
		if !slices.Equal(again, first) {
			t.Fatalf("request %d on a kept sampler drew %v; a new one drew %v", i+2, again, first)
		}
		if now := held(hot); len(now) != 1 || now[0] != kept[0] {
			t.Fatalf("request %d: kept %v, before %v; want the same sampler back", i+2, now, kept)
		}
	}
	if len(first) != 24 {
		t.Fatalf("%d tokens, want 24", len(first))
	}
}

// The pool holds at most max samplers, letting the oldest go, and keeps
// none with a grammar or a parameter that is not a number.
func TestSamplersBound(t *testing.T) {
	ss := newSamplers(2)
	p1, p2 := llama.SamplingParams{Temp: 1}, llama.SamplingParams{Temp: 0.5}
	a, b, c := &llama.SamplingContext{}, &llama.SamplingContext{}, &llama.SamplingContext{}
	ss.put(p1, a)
	ss.put(p2, b)
	ss.put(p1, c)
	if want := []keptSampler{{p2, b}, {p1, c}}; !slices.Equal(ss.held, want) {
		t.Fatalf("after three puts into two: %v, want %v", ss.held, want)
	}
	ss.put(llama.SamplingParams{Temp: 1, Grammar: "root ::= \"x\""}, a)
	nan := float32(0)
	ss.put(llama.SamplingParams{Temp: nan / nan}, a)
	if len(ss.held) != 2 {
		t.Fatalf("a grammar's or a NaN's sampler kept: %v", ss.held)
	}
}
