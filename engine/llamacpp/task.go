package llamacpp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
	"kvwin/kvcache"
)

// task is one request inside the engine. Fields above mu belong to the run
// loop; the caller reads only what mu guards.
type task struct {
	ctx     context.Context
	cancel  context.CancelFunc
	req     engine.Request
	prompt  []int
	maxNew  int
	arrived time.Time
	sampler *llama.SamplingContext
	params  llama.SamplingParams // the sampler's (samplers.go)
	chain   kvcache.Chain        // the prompt's block keys
	restore *restore             // a snapshot to restore instead of prefilling; nil for none
	// embed: the task wants the prompt's embedding, not a generation
	// (embed.go); embedding holds it when done.
	embed     bool
	embedding []float32
	// outGrammar is the grammar of an engine.Output, kept by con, its
	// budget keeper (constrain.go); deferred is a sampled token waiting
	// for its close, computed off the loop.
	outGrammar string
	con        *constraint
	deferred   *deferredToken

	slot       int
	nPrompt    int // prompt tokens whose KV the slot holds
	cached     int
	pending    int // sampled token still to be decoded; -1 for none
	logitsAt   int // row of this task's logits in the current batch; -1 for none
	generated  []int
	logprobs   []engine.TokenLogprob // of generated, when asked for
	unsentLP   []engine.TokenLogprob // not yet in an event
	dec        textDecoder
	stop       stopMatcher
	text       strings.Builder
	firstAt    time.Time
	promptEval time.Duration
	// render and tokenize are the caller's rendering of the prompt; ready
	// is when its tokens were, startedAt when the loop gave it a slot.
	render, tokenize time.Duration
	ready, startedAt time.Time
	decodeTime       time.Duration
	// journal is where the slot journal stood at the task's end (the
	// loop's finish): engine.Result.Journal.
	journal kvcache.Cursor

	mu     sync.Mutex
	events []engine.Event
	done   bool
	result engine.Result
	err    error
	notify chan struct{} // capacity 1: "something changed"
	closed <-chan struct{}
}

func newTask(ctx context.Context, e *Engine, req engine.Request, prompt []int, arrived time.Time) (*task, error) {
	s := req.Sampling
	if err := checkLogitBias(s.LogitBias, e.vocab); err != nil {
		return nil, err
	}
	var outGrammar string
	if s.Output != nil {
		if s.Grammar != "" {
			return nil, engine.Invalid("a grammar and a JSON output format cannot be combined")
		}
		g, shortest, err := outputGrammar(s.Output) // grammar.go
		if err != nil {
			return nil, err
		}
		if err := checkBudget(shortest, maxNewTokens(e, req, prompt)); err != nil {
			return nil, err
		}
		s.Grammar = g
		outGrammar = g
	} else if s.Grammar != "" {
		if err := checkRawGrammar(s.Grammar); err != nil { // gbnf.go
			return nil, err
		}
	}
	params := llama.SamplingParams{
		TopK: s.TopK, TopP: s.TopP, MinP: s.MinP, TypicalP: 1, Temp: s.Temperature,
		RepeatLastN: s.RepeatLastN, PenaltyRepeat: s.RepeatPenalty, PenaltyFreq: s.FrequencyPenalty, PenaltyPresent: s.PresencePenalty,
		Seed: e.seedOf(s.Seed), Grammar: s.Grammar,
	}
	sampler, err := e.samplers.get(e.model, params)
	if err != nil && s.Grammar != "" {
		return nil, engine.Invalid("the grammar does not parse (GBNF, root rule \"root\"): %v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	var con *constraint
	if outGrammar != "" {
		if con, err = newConstraint(ctx, e, outGrammar, maxNewTokens(e, req, prompt)); err != nil { // constrain.go
			return nil, err
		}
	}
	if s.RepeatPenalty != 0 && s.RepeatPenalty != 1 {
		// Penalties look back over the prompt too, as in llama-server.
		for _, tok := range prompt[max(0, len(prompt)-s.RepeatLastN):] {
			sampler.Accept(tok, false)
		}
	}
	maxNew := maxNewTokens(e, req, prompt)
	tctx, cancel := context.WithCancel(ctx)
	return &task{
		ctx: tctx, cancel: cancel, req: req, prompt: prompt, maxNew: maxNew, arrived: arrived,
		sampler: sampler, params: params, slot: -1, pending: -1, logitsAt: -1, outGrammar: outGrammar, con: con,
		stop:   stopMatcher{stops: nonEmpty(req.Stop)},
		notify: make(chan struct{}, 1), closed: e.stopped,
	}, nil
}

// maxNewTokens is how many tokens a request may generate: its max_tokens,
// within the context left after the prompt.
func maxNewTokens(e *Engine, req engine.Request, prompt []int) int {
	maxNew := e.cfg.Ctx - len(prompt)
	if req.MaxTokens > 0 && req.MaxTokens < maxNew {
		maxNew = req.MaxTokens
	}
	return maxNew
}

// checkBudget refuses an output format whose shortest output cannot fit
// the token limit, before any work: counted in characters, as the budget
// keeper counts a close (constrain.go).
func checkBudget(shortest, maxNew int) error {
	if shortest < 0 {
		return engine.Invalid("the output format allows no finite output (a required property refers back to its own schema)")
	}
	if shortest > maxNew {
		return engine.Invalid("the token limit (max_tokens; num_predict on the Ollama API, n_predict on /completion) is %d but the shortest output the format allows takes %d tokens", maxNew, shortest)
	}
	return nil
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// timings reports the task's figures so far. Loop-owned.
func (t *task) timings() engine.Timings {
	tm := engine.Timings{
		PromptTokens: len(t.prompt), CachedTokens: t.cached, PromptEval: t.promptEval,
		GeneratedTokens: len(t.generated), Decode: t.decodeTime,
	}
	if !t.firstAt.IsZero() {
		tm.FirstToken = t.firstAt.Sub(t.arrived)
	}
	tm.Render, tm.Tokenize = t.render, t.tokenize
	if !t.startedAt.IsZero() {
		tm.Queue = t.startedAt.Sub(t.ready)
	}
	return tm
}

// emit queues an event for the caller. Loop-owned side.
func (t *task) emit(ev engine.Event) {
	if !ev.First && ev.Text == "" && len(ev.Logprobs) == 0 {
		return
	}
	t.mu.Lock()
	t.events = append(t.events, ev)
	t.mu.Unlock()
	t.signal()
}

func (t *task) signal() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// finish ends the task with a result or an error. Loop-owned side.
func (t *task) finish(reason string, err error) {
	if t.con != nil {
		t.con.free()
	}
	t.mu.Lock()
	t.done, t.err = true, err
	t.result = engine.Result{
		Text: t.text.String(), Tokens: t.generated, Logprobs: t.logprobs, FinishReason: reason, Slot: t.slot, Timings: t.timings(),
		StopSequence: t.stop.matched, Journal: t.journal,
	}
	t.mu.Unlock()
	t.signal()
}

// wait delivers events to stream on the caller's goroutine until the task is
// done. If stream fails, the task is cancelled and wait still waits for the
// loop to release the slot, so the slot is free when Generate returns.
func (t *task) wait(stream engine.StreamFunc) (engine.Result, error) {
	var streamErr error
	for {
		select {
		case <-t.notify:
		case <-t.closed:
			// The loop has stopped; it finished every task it knew of, so
			// drain what is there and report a closed engine otherwise.
			t.signal()
			t.mu.Lock()
			done := t.done
			t.mu.Unlock()
			if !done {
				return engine.Result{}, engine.ErrClosed
			}
		}
		t.mu.Lock()
		events, done, res, err := t.events, t.done, t.result, t.err
		t.events = nil
		t.mu.Unlock()
		for _, ev := range events {
			if stream != nil && streamErr == nil {
				if streamErr = stream(ev); streamErr != nil {
					t.cancel()
				}
			}
		}
		if !done {
			continue
		}
		switch {
		case streamErr != nil:
			return res, streamErr
		case err != nil:
			return res, err
		}
		return res, nil
	}
}

// seedOf is the sampler seed of a request that asked for seed: its own,
// or, when it named none (engine.DefaultSampling's random seed), the
// engine's Config.Seed if set.
func (e *Engine) seedOf(seed uint32) uint32 {
	if seed == engine.DefaultSampling().Seed && e.cfg.Seed != 0 {
		return e.cfg.Seed
	}
	return seed
}
