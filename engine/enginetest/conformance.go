package enginetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"kvwin/engine"
)

// Options tunes Run to a backend.
type Options struct {
	// Request is a request the backend answers in at least two events;
	// zero: one user message of about 200 bytes (whole blocks of any
	// registry's keys), greedy, MaxTokens 8, IgnoreEOS.
	Request engine.Request
	// Long is a request the backend is still generating when the suite
	// cancels it at its first event; zero: Request with MaxTokens 0 (until
	// the slot is full).
	Long engine.Request
	// Caches: the backend reuses KV, so the second of two identical
	// requests reports cached tokens.
	Caches bool
	// Unreachable, if set, returns the backend configured for a server
	// that is not there: Generate fails before any event with
	// engine.ErrUnavailable or engine.ErrTimeout.
	Unreachable func(t *testing.T) engine.Backend
	// EstimatedFirst: the first event's prompt and cached tokens are the
	// backend's estimates, which the result replaces with the server's
	// counts (Ollama reports them only with its last chunk). They must
	// still be consistent, and CachedEstimated set on both.
	EstimatedFirst bool
	// LateContextLength: the backend learns that a prompt did not fit
	// only when its server's answer ends (Ollama cuts the prompt and
	// reports its count last), so the *engine.ContextLengthError may
	// follow events.
	LateContextLength bool
	// NoLeakCheck skips counting the process's goroutines after a
	// cancellation (for backends whose background goroutines come and go).
	NoLeakCheck bool
}

// wait bounds how long the suite waits for something that should happen
// (a Generate returning, goroutines ending): a hang guard, not a
// measurement, so generous: a real Ollama on a loaded two-core machine
// took two minutes for three short generations, and 30 s failed the suite.
const wait = 5 * time.Minute

// Run is the conformance suite of engine.Backend: every adapter and the
// router pass it. newBackend returns a fresh backend for each subtest and
// arranges its cleanup. It checks:
//   - streaming: exactly the first event has First and carries the prompt
//     timings, later events carry text, the text adds up to Result.Text in
//     valid UTF-8, nothing is streamed after Generate returns;
//   - cancellation: a context cancelled before or during a generation
//     (or past its deadline) ends Generate with the context's error,
//     leaving no goroutine behind; a StreamFunc's error ends it with that
//     error;
//   - concurrency: concurrent generations each stream their own answer;
//   - logprobs: asked for, they come one per generated token at most, in
//     the events and the result alike, or the request is refused with
//     engine.ErrNoLogprobs before any event;
//   - errors: a request with no prompt or two is engine.ErrInvalidRequest
//     before any event, one longer than a slot *engine.ContextLengthError;
//     an unreachable backend is ErrUnavailable or ErrTimeout;
//   - timings: 0 ≤ cached ≤ prompt tokens, the same in the first event
//     and the result, generated tokens within MaxTokens, cached tokens on
//     a repeated prompt where the backend caches;
//   - abilities: each optional interface the backend implements works,
//     or answers engine.ErrNotSupported (a router none of whose backends
//     has it), or lists no slots (the same, for SlotReporter).
func Run(t *testing.T, newBackend func(t *testing.T) engine.Backend, opts Options) {
	if opts.Request.CheckPrompt() != nil {
		s := engine.DefaultSampling()
		s.Temperature, s.Seed = 0, 42
		msg := strings.Repeat("Tell me about the cache, the window and the slots. ", 4)
		opts.Request = engine.Request{Messages: []engine.Message{{Role: engine.RoleUser, Content: msg}},
			MaxTokens: 8, IgnoreEOS: true, Sampling: s, Slot: -1}
	}
	if opts.Long.CheckPrompt() != nil {
		opts.Long = opts.Request
		opts.Long.MaxTokens = 0
		opts.Long.IgnoreEOS = true
	}
	t.Run("Info", func(t *testing.T) {
		info := newBackend(t).Info()
		if info.Name == "" || info.Slots < 0 || info.ContextSlot < 0 {
			t.Fatalf("Info() = %+v: want a name and no negative sizes", info)
		}
	})
	t.Run("Streaming", func(t *testing.T) { testStreaming(t, newBackend(t), opts) })
	t.Run("NoStream", func(t *testing.T) { testNoStream(t, newBackend(t), opts) })
	t.Run("StreamError", func(t *testing.T) { testStreamError(t, newBackend(t), opts) })
	t.Run("CancelledBefore", func(t *testing.T) { testCancelledBefore(t, newBackend(t), opts) })
	t.Run("CancelledDuring", func(t *testing.T) { testCancelledDuring(t, newBackend(t), opts) })
	t.Run("DeadlineBefore", func(t *testing.T) { testDeadlineBefore(t, newBackend(t), opts) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newBackend(t), opts) })
	t.Run("Logprobs", func(t *testing.T) { testLogprobs(t, newBackend(t), opts) })
	t.Run("InvalidPrompt", func(t *testing.T) { testInvalidPrompt(t, newBackend(t), opts) })
	t.Run("TooLong", func(t *testing.T) { testTooLong(t, newBackend(t), opts) })
	if opts.Unreachable != nil {
		t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, opts.Unreachable(t), opts) })
	}
	if opts.Caches {
		t.Run("Cached", func(t *testing.T) { testCached(t, newBackend(t), opts) })
	}
	t.Run("Abilities", func(t *testing.T) { testAbilities(t, newBackend(t), opts) })
}

// recorder is a StreamFunc that keeps the events and notices any call
// after Generate returned.
type recorder struct {
	mu     sync.Mutex
	events []engine.Event
	done   bool
	late   int
	onEv   func(engine.Event) error
}

func (r *recorder) stream(ev engine.Event) error {
	r.mu.Lock()
	if r.done {
		r.late++
		r.mu.Unlock()
		return errors.New("enginetest: streamed after Generate returned")
	}
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if r.onEv != nil {
		return r.onEv(ev)
	}
	return nil
}

// generate runs b.Generate on its own goroutine and waits for it, failing
// if it does not return within wait.
func generate(t *testing.T, ctx context.Context, b engine.Backend, req engine.Request, r *recorder) (engine.Result, error) {
	t.Helper()
	type out struct {
		res engine.Result
		err error
	}
	done := make(chan out, 1)
	var stream engine.StreamFunc
	if r != nil {
		stream = r.stream
	}
	go func() {
		res, err := b.Generate(ctx, req, stream)
		if r != nil {
			r.mu.Lock()
			r.done = true
			r.mu.Unlock()
		}
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-time.After(wait):
		t.Fatalf("Generate did not return within %v", wait)
		return engine.Result{}, nil
	}
}

// checkResult checks a finished generation against its request.
func checkResult(t *testing.T, req engine.Request, res engine.Result) {
	t.Helper()
	tm := res.Timings
	if tm.PromptTokens <= 0 || tm.CachedTokens < 0 || tm.CachedTokens > tm.PromptTokens {
		t.Errorf("result timings %+v: want prompt tokens > 0 and 0 ≤ cached ≤ prompt", tm)
	}
	if tm.GeneratedTokens <= 0 || (req.MaxTokens > 0 && tm.GeneratedTokens > req.MaxTokens) {
		t.Errorf("generated %d tokens, want 1..%d", tm.GeneratedTokens, req.MaxTokens)
	}
	if req.IgnoreEOS && req.MaxTokens > 0 && (tm.GeneratedTokens != req.MaxTokens || res.FinishReason != engine.FinishLength) {
		t.Errorf("ignoring end-of-generation, generated %d tokens (finish %q), want MaxTokens %d (%q)",
			tm.GeneratedTokens, res.FinishReason, req.MaxTokens, engine.FinishLength)
	}
	if len(res.Tokens) > tm.GeneratedTokens {
		t.Errorf("%d token ids for %d generated tokens", len(res.Tokens), tm.GeneratedTokens)
	}
	if res.FinishReason != engine.FinishStop && res.FinishReason != engine.FinishLength {
		t.Errorf("finish reason %q, want %q or %q", res.FinishReason, engine.FinishStop, engine.FinishLength)
	}
	if req.MaxTokens > 0 && tm.GeneratedTokens == req.MaxTokens && !req.IgnoreEOS && res.FinishReason == "" {
		t.Errorf("MaxTokens reached without a finish reason")
	}
	if !utf8.ValidString(res.Text) {
		t.Errorf("result text %q is not valid UTF-8", res.Text)
	}
}

func testStreaming(t *testing.T, b engine.Backend, opts Options) {
	r := &recorder{}
	res, err := generate(t, context.Background(), b, opts.Request, r)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkResult(t, opts.Request, res)
	if len(r.events) == 0 {
		t.Fatal("no event streamed")
	}
	var text strings.Builder
	for i, ev := range r.events {
		if ev.First != (i == 0) {
			t.Errorf("event %d: First = %v; only the first event has it", i, ev.First)
		}
		if i > 0 && ev.Text == "" {
			t.Errorf("event %d carries no text; every later event does", i)
		}
		if !utf8.ValidString(ev.Text) {
			t.Errorf("event %d: text %q splits a UTF-8 character", i, ev.Text)
		}
		text.WriteString(ev.Text)
	}
	if text.String() != res.Text {
		t.Errorf("streamed text %q, result text %q: they must be the same", text.String(), res.Text)
	}
	first := r.events[0].Timings
	if first.PromptTokens <= 0 || first.CachedTokens < 0 || first.CachedTokens > first.PromptTokens {
		t.Errorf("first event's timings %+v: want prompt tokens > 0 and 0 ≤ cached ≤ prompt", first)
	}
	if opts.EstimatedFirst {
		if !first.CachedEstimated || !res.Timings.CachedEstimated {
			t.Errorf("estimated first-event timings without CachedEstimated: first %v, result %v", first.CachedEstimated, res.Timings.CachedEstimated)
		}
	} else if first.PromptTokens != res.Timings.PromptTokens || first.CachedTokens != res.Timings.CachedTokens {
		t.Errorf("first event's prompt/cached tokens %d/%d, result's %d/%d: the first event carries the prompt timings",
			first.PromptTokens, first.CachedTokens, res.Timings.PromptTokens, res.Timings.CachedTokens)
	}
	if ev := r.events[0]; ev.Backend != res.Backend {
		t.Errorf("first event names backend %q, result %q", ev.Backend, res.Backend)
	}
	if ev := r.events[0]; ev.Slot >= 0 && res.Slot >= 0 && ev.Slot != res.Slot {
		t.Errorf("first event's slot %d, result's %d", ev.Slot, res.Slot)
	}
	if first.CachedEstimated != res.Timings.CachedEstimated {
		t.Errorf("first event's CachedEstimated %v, result's %v", first.CachedEstimated, res.Timings.CachedEstimated)
	}
	if r.late > 0 {
		t.Errorf("%d events streamed after Generate returned", r.late)
	}
}

func testNoStream(t *testing.T, b engine.Backend, opts Options) {
	res, err := generate(t, context.Background(), b, opts.Request, nil)
	if err != nil {
		t.Fatalf("Generate without a StreamFunc: %v", err)
	}
	checkResult(t, opts.Request, res)
	if res.Text == "" {
		t.Errorf("no text generated without a StreamFunc")
	}
}

func testStreamError(t *testing.T, b engine.Backend, opts Options) {
	for _, at := range []int{1, 2} {
		t.Run(fmt.Sprintf("at event %d", at), func(t *testing.T) {
			stop := errors.New("enginetest: the client went away")
			r := &recorder{}
			r.onEv = func(engine.Event) error {
				if len(r.events) == at {
					return stop
				}
				return nil
			}
			_, err := generate(t, context.Background(), b, opts.Long, r)
			if !errors.Is(err, stop) {
				t.Fatalf("StreamFunc failed with %v, Generate returned %v: want the StreamFunc's error", stop, err)
			}
			if len(r.events) != at {
				t.Errorf("%d events streamed, want %d: the StreamFunc's error ends the generation", len(r.events), at)
			}
			if r.late > 0 {
				t.Errorf("%d events streamed after Generate returned", r.late)
			}
		})
	}
}

// testTooLong sends a prompt of more tokens than a slot holds in any
// vocabulary (a word a token at least).
func testTooLong(t *testing.T, b engine.Backend, opts Options) {
	// A remote backend learns its context at its first request.
	if _, err := generate(t, context.Background(), b, opts.Request, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	limit := b.Info().ContextSlot
	if limit <= 0 {
		t.Skip("Info names no context per slot")
	}
	req := opts.Request
	req.Messages = []engine.Message{{Role: engine.RoleUser, Content: strings.Repeat("cache ", limit+16)}}
	r := &recorder{}
	_, err := generate(t, context.Background(), b, req, r)
	var cl *engine.ContextLengthError
	if !errors.As(err, &cl) {
		t.Fatalf("a prompt of over %d tokens for slots of %d: Generate returned %v, want *engine.ContextLengthError", limit+16, limit, err)
	}
	if cl.Limit != limit || cl.PromptTokens <= limit {
		t.Errorf("%v: want the limit %d and the prompt's tokens over it", cl, limit)
	}
	if len(r.events) > 0 && !opts.LateContextLength {
		t.Errorf("%d events streamed for a prompt that does not fit", len(r.events))
	}
}

func testCancelledBefore(t *testing.T, b engine.Backend, opts Options) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	testEndedBefore(t, ctx, b, opts, context.Canceled,
		"Generate with a cancelled context returned %v, want context.Canceled",
		"%d events streamed for a request cancelled before it began")
}

func testCancelledDuring(t *testing.T, b engine.Backend, opts Options) {
	// A first generation warms connections and pools, so the baseline
	// counts what a serving backend keeps.
	if _, err := generate(t, context.Background(), b, opts.Request, nil); err != nil {
		t.Fatalf("warm-up Generate: %v", err)
	}
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{onEv: func(ev engine.Event) error {
		if ev.First {
			cancel()
		}
		return nil
	}}
	_, err := generate(t, ctx, b, opts.Long, r)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate cancelled at its first event returned %v, want context.Canceled", err)
	}
	if len(r.events) == 0 {
		t.Fatal("no event streamed before the cancellation")
	}
	if r.late > 0 {
		t.Errorf("%d events streamed after Generate returned", r.late)
	}
	if opts.NoLeakCheck {
		return
	}
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := runtime.NumGoroutine(); n > base; n = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines %v after the cancellation, %d before it:\n%s", n, wait, base, buf[:runtime.Stack(buf, true)])
		}
		<-tick.C
	}
}

func testInvalidPrompt(t *testing.T, b engine.Backend, opts Options) {
	none := opts.Request
	none.Messages, none.Prompt, none.Tokens = nil, "", nil
	two := opts.Request
	two.Messages, two.Prompt, two.Tokens = []engine.Message{{Role: engine.RoleUser, Content: "hi"}}, "hi", nil
	for _, c := range []struct {
		name string
		req  engine.Request
	}{{"none", none}, {"two", two}} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			_, err := generate(t, context.Background(), b, c.req, r)
			if !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("Generate with %s prompt forms returned %v, want engine.ErrInvalidRequest", c.name, err)
			}
			if len(r.events) > 0 {
				t.Errorf("%d events streamed for an invalid request", len(r.events))
			}
		})
	}
}

func testUnreachable(t *testing.T, b engine.Backend, opts Options) {
	r := &recorder{}
	_, err := generate(t, context.Background(), b, opts.Request, r)
	if !errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, engine.ErrTimeout) {
		t.Fatalf("Generate on an unreachable backend returned %v, want engine.ErrUnavailable or engine.ErrTimeout", err)
	}
	if len(r.events) > 0 {
		t.Errorf("%d events streamed by an unreachable backend", len(r.events))
	}
}

func testCached(t *testing.T, b engine.Backend, opts Options) {
	first, err := generate(t, context.Background(), b, opts.Request, nil)
	if err != nil {
		t.Fatalf("first Generate: %v", err)
	}
	r := &recorder{}
	second, err := generate(t, context.Background(), b, opts.Request, r)
	if err != nil {
		t.Fatalf("second Generate: %v", err)
	}
	checkResult(t, opts.Request, second)
	if second.Timings.PromptTokens != first.Timings.PromptTokens {
		t.Errorf("the same prompt counted %d then %d tokens", first.Timings.PromptTokens, second.Timings.PromptTokens)
	}
	if second.Timings.CachedTokens <= 0 {
		t.Errorf("the repeated prompt of %d tokens reused %d: want some reuse", second.Timings.PromptTokens, second.Timings.CachedTokens)
	}
	if len(r.events) > 0 && !opts.EstimatedFirst && r.events[0].Timings.CachedTokens != second.Timings.CachedTokens {
		t.Errorf("first event says %d cached, result %d", r.events[0].Timings.CachedTokens, second.Timings.CachedTokens)
	}
}

func testDeadlineBefore(t *testing.T, b engine.Backend, opts Options) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	testEndedBefore(t, ctx, b, opts, context.DeadlineExceeded,
		"Generate past its context's deadline returned %v, want context.DeadlineExceeded",
		"%d events streamed past the deadline")
}

// testEndedBefore checks a Generate whose context ended before it began:
// it fails with want (else failing with errFormat of the error) and
// streams no event (else erring with eventsFormat of their count).
func testEndedBefore(t *testing.T, ctx context.Context, b engine.Backend, opts Options, want error, errFormat, eventsFormat string) {
	t.Helper()
	r := &recorder{}
	_, err := generate(t, ctx, b, opts.Request, r)
	if !errors.Is(err, want) {
		t.Fatalf(errFormat, err)
	}
	if len(r.events) > 0 {
		t.Errorf(eventsFormat, len(r.events))
	}
}

func testConcurrent(t *testing.T, b engine.Backend, opts Options) {
	const n = 3
	type out struct {
		res    engine.Result
		err    error
		events []engine.Event
	}
	outs := make(chan out, n)
	for range n {
		go func() {
			r := &recorder{}
			res, err := b.Generate(context.Background(), opts.Request, r.stream)
			outs <- out{res, err, r.events}
		}()
	}
	deadline := time.After(wait)
	for i := 0; i < n; i++ {
		select {
		case o := <-outs:
			if o.err != nil {
				t.Errorf("concurrent Generate: %v", o.err)
				continue
			}
			checkResult(t, opts.Request, o.res)
			var text strings.Builder
			for _, ev := range o.events {
				text.WriteString(ev.Text)
			}
			if len(o.events) == 0 || !o.events[0].First || text.String() != o.res.Text {
				t.Errorf("concurrent Generate streamed %q (%d events), result %q", text.String(), len(o.events), o.res.Text)
			}
		case <-deadline:
			t.Fatalf("%d of %d concurrent generations did not return within %v", n-i, n, wait)
		}
	}
}

func testLogprobs(t *testing.T, b engine.Backend, opts Options) {
	req := opts.Request
	req.Logprobs, req.TopLogprobs = true, 2
	r := &recorder{}
	res, err := generate(t, context.Background(), b, req, r)
	if errors.Is(err, engine.ErrNoLogprobs) {
		if len(r.events) > 0 {
			t.Errorf("%d events streamed before refusing logprobs", len(r.events))
		}
		return
	}
	if err != nil {
		t.Fatalf("Generate with logprobs: %v", err)
	}
	var streamed []engine.TokenLogprob
	for _, ev := range r.events {
		streamed = append(streamed, ev.Logprobs...)
	}
	if len(res.Logprobs) == 0 || len(res.Logprobs) > res.Timings.GeneratedTokens {
		t.Errorf("%d logprobs for %d generated tokens: want one per token at most, and some", len(res.Logprobs), res.Timings.GeneratedTokens)
	}
	if len(streamed) != len(res.Logprobs) {
		t.Errorf("%d logprobs streamed, %d in the result", len(streamed), len(res.Logprobs))
	}
	for i, lp := range res.Logprobs {
		if lp.Logprob > 0 || len(lp.Top) > req.TopLogprobs {
			t.Errorf("logprob %d: %+v: want ≤ 0 and at most %d alternatives", i, lp, req.TopLogprobs)
		}
	}
}
