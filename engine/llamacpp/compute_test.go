package llamacpp

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"kvwin/engine"
)

// Three engines in one process, prefilling at the same time, answer
// exactly as one alone does: before computeMu, tinyBLAS's process-wide
// work counter (compute.go) left rows of their matrix products unwritten,
// the logits came out NaN, and under a grammar llama.cpp aborted the
// process.
func TestEnginesInOneProcessAnswerAsOneAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("three engines on the test model")
	}
	var engines []*Engine
	for range 3 {
		engines = append(engines, newTestEngine(t, Config{Slots: 1, Ctx: 2048}))
	}
	ask := func(e *Engine, seed int) (string, error) {
		req := greedy(24)
		req.NoCache = true // every turn computes its whole prompt
		req.Sampling.Grammar = `root ::= [a-z ]{24}`
		req.Messages = []engine.Message{{Role: "user", Content: text(seed, 1500)}}
		res, err := e.Generate(context.Background(), req, nil)
		return res.Text, err
	}
	alone := make([]string, len(engines))
	for i := range engines {
		var err error
		if alone[i], err = ask(engines[0], i); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 4 {
		got := make([]string, len(engines))
		errs := make([]error, len(engines))
		var wg sync.WaitGroup
		for j, e := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[j], errs[j] = ask(e, (j+round)%len(engines))
			}()
		}
		wg.Wait()
		for j := range engines {
			p := (j + round) % len(engines)
			if errs[j] != nil {
				t.Fatalf("round %d, engine %d, prompt %d: %v", round, j, p, errs[j])
			}
			if got[j] != alone[p] {
				t.Fatalf("round %d, engine %d, prompt %d: %q beside the others, %q alone", round, j, p, got[j], alone[p])
			}
		}
	}
}

// Logits that are not numbers end the answer with an error, under a
// grammar (where sampling them would abort llama.cpp) or not, and the
// engine serves the next request as before.
func TestLogitsThatAreNotNumbersEndTheAnswerWithAnError(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 512})
	msgs := []engine.Message{{Role: "user", Content: text(1, 200)}}
	want := chat(t, e, msgs, 8).Text
	for _, grammar := range []string{`root ::= [a-z ]{8}`, ""} {
		n := 0
		editLogits = func(row []float32) {
			if n++; n == 3 { // the third token's
				for i := range row {
					row[i] = float32(math.NaN())
				}
			}
		}
		req := greedy(8)
		req.Messages, req.Sampling.Grammar = msgs, grammar
		_, err := e.Generate(context.Background(), req, nil)
		editLogits = nil
		if !errors.Is(err, errNotFinite) {
			t.Fatalf("grammar %q: err %v, want errNotFinite", grammar, err)
		}
		if got := chat(t, e, msgs, 8).Text; got != want {
			t.Fatalf("after the error: %q, want %q", got, want)
		}
	}
}
