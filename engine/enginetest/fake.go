package enginetest

import (
	"context"
	"errors"
	"strings"
	"sync"

	"kvwin/engine"
)

// Backend is a scripted engine.Backend that records the requests it gets.
// Set its script before it serves; it is then only read, and Backend is
// safe for concurrent use.
//
// Without a script (Events nil and Err nil) it answers like a small model
// that passes Run: Reply word by word, one token per word (repeated up to
// MaxTokens or the slot's end when the request ignores end-of-generation),
// with logprobs when asked; the prompt counted in the fake vocabulary
// (Encode, messages rendered by ChatML), a prompt that fills ContextSlot
// refused with *engine.ContextLengthError, and the prefix it shares with
// the previous prompt reported as cached (none with NoCache).
type Backend struct {
	About engine.Info // what Info returns

	Events    []engine.Event // streamed, when the caller streams
	Result    engine.Result  // returned on success with Events
	Err       error          // returned before any event (ctx's error first, if it ended)
	ErrAfter  error          // returned after the events
	Block     bool           // after the events, wait for the context to end
	PanicWith any            // panic on entry with this value
	PanicLate bool           // panic after the events instead
	Reply     string         // the unscripted answer; "" is "Hello world"
	// NoRecord keeps no requests and calls (a fuzz target's millions).
	NoRecord bool
	// Accept makes Generate tell its caller the request is accepted
	// (engine.Accepted) before its events, as a real backend does once
	// its checks have passed; Prefill, if set, then holds the events
	// until it is closed (or the context ends): a long queue or prefill.
	Accept  bool
	Prefill chan struct{}

	Entered   chan engine.Request // if set, every request is sent here on entry (buffer it)
	StreamErr chan error          // if set, gets the error a StreamFunc returned (buffer it)
	Hold      chan struct{}       // if set, after the events wait for it (or the context) before finishing

	Started   chan struct{} // closed when Generate is first entered
	Cancelled chan struct{} // closed when Generate sees its context end, wherever it is
	// LateErr, if set, makes a blocked Generate call its StreamFunc once
	// more after its context ended (as a careless backend might), and
	// gets what the StreamFunc returned.
	LateErr chan error

	release     chan struct{}
	releaseOnce sync.Once
	startOnce   sync.Once
	cancelOnce  sync.Once

	mu      sync.Mutex
	reqs    []engine.Request
	calls   []string
	last    []int // the previous unscripted prompt, for its cached prefix
	forgets int
}

var _ engine.Backend = (*Backend)(nil)

// New returns an unscripted Backend describing itself as info.
func New(info engine.Info) *Backend {
	return &Backend{
		About:     info,
		Started:   make(chan struct{}),
		Cancelled: make(chan struct{}),
		release:   make(chan struct{}),
	}
}

// Script makes b stream events and return a result whose text is their
// concatenation, as the engine contract requires.
func (b *Backend) Script(finish string, t engine.Timings, events ...engine.Event) *Backend {
	var text strings.Builder
	for _, ev := range events {
		text.WriteString(ev.Text)
	}
	b.Events = events
	b.Result = engine.Result{Text: text.String(), FinishReason: finish, Slot: 0, Timings: t}
	return b
}

// Release makes every blocked Generate give up with an error instead of
// waiting for its context: call it at test cleanup so a test that never
// cancels fails instead of hanging a server's Close. It is idempotent.
func (b *Backend) Release() { b.releaseOnce.Do(func() { close(b.release) }) }

// Info returns About.
func (b *Backend) Info() engine.Info { return b.About }

// Requests returns a copy of the requests Generate received so far.
func (b *Backend) Requests() []engine.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]engine.Request(nil), b.reqs...)
}

// Calls returns the methods called so far, in order ("Generate",
// "Tokenize", …: every ability records its own).
func (b *Backend) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

func (b *Backend) record(method string) {
	if b.NoRecord {
		return
	}
	b.mu.Lock()
	b.calls = append(b.calls, method)
	b.mu.Unlock()
}

// errReleased is what a blocked Generate returns when released.
var errReleased = errors.New("enginetest: released at cleanup, context never cancelled")

// Generate plays the script (or the unscripted answer) on the calling
// goroutine. It blocks only where the script says (Block, Hold).
func (b *Backend) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	// A context that ends early (before the script reaches Block, or
	// through a stream call that fails) is seen as well: a test that
	// cancels right after Started must not depend on where Generate was.
	defer func() {
		if ctx.Err() != nil {
			b.cancelOnce.Do(func() { close(b.Cancelled) })
		}
	}()
	if !b.NoRecord {
		b.mu.Lock()
		b.reqs = append(b.reqs, req)
		b.calls = append(b.calls, "Generate")
		b.mu.Unlock()
	}
	b.startOnce.Do(func() { close(b.Started) })
	if b.Entered != nil {
		b.Entered <- req
	}
	if b.PanicWith != nil {
		panic(b.PanicWith)
	}
	if err := ctx.Err(); err != nil {
		return engine.Result{}, err // as a real backend's call would end
	}
	if b.Err != nil {
		return engine.Result{}, b.Err
	}
	if b.Accept {
		engine.Accepted(ctx)
	}
	if b.Prefill != nil {
		select {
		case <-b.Prefill:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	if b.Events == nil {
		return b.answer(ctx, req, stream)
	}
	if stream != nil {
		for _, ev := range b.Events {
			if err := stream(ev); err != nil {
				if b.StreamErr != nil {
					b.StreamErr <- err
				}
				return engine.Result{}, err
			}
		}
	}
	if b.Hold != nil {
		select {
		case <-b.Hold:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	if b.PanicLate {
		panic("late boom")
	}
	if b.Block {
		return b.block(ctx, stream)
	}
	if b.ErrAfter != nil {
		return engine.Result{}, b.ErrAfter
	}
	return b.Result, nil
}

// block waits for ctx (or Release) after the events.
func (b *Backend) block(ctx context.Context, stream engine.StreamFunc) (engine.Result, error) {
	select {
	case <-ctx.Done():
	case <-b.release:
		return engine.Result{}, errReleased
	}
	b.cancelOnce.Do(func() { close(b.Cancelled) })
	if stream != nil && b.LateErr != nil {
		b.LateErr <- stream(engine.Event{Text: "late"})
	}
	return engine.Result{}, ctx.Err()
}

// answer is the unscripted generation.
func (b *Backend) answer(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	if err := req.CheckPrompt(); err != nil {
		return engine.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return engine.Result{}, err
	}
	prompt := promptTokens(req)
	info := b.About
	if info.ContextSlot > 0 && len(prompt) >= info.ContextSlot {
		return engine.Result{}, &engine.ContextLengthError{PromptTokens: len(prompt), Limit: info.ContextSlot}
	}
	b.mu.Lock()
	cached := 0
	if !req.NoCache {
		for cached < len(prompt)-1 && cached < len(b.last) && b.last[cached] == prompt[cached] {
			cached++
		}
	}
	b.last = prompt
	b.mu.Unlock()

	words := strings.SplitAfter(b.reply(), " ")
	t := engine.Timings{PromptTokens: len(prompt), CachedTokens: cached}
	res := engine.Result{FinishReason: engine.FinishStop, Slot: 0}
	var text strings.Builder
	for i := 0; ; i++ {
		if req.MaxTokens > 0 && i == req.MaxTokens {
			res.FinishReason = engine.FinishLength
			break
		}
		if i == len(words) && !req.IgnoreEOS {
			break
		}
		if info.ContextSlot > 0 && len(prompt)+i >= info.ContextSlot {
			res.FinishReason = engine.FinishLength
			break
		}
		if err := ctx.Err(); err != nil {
			return engine.Result{}, err
		}
		w := words[i%len(words)]
		text.WriteString(w)
		res.Tokens = append(res.Tokens, 1000+i)
		var lps []engine.TokenLogprob
		if req.Logprobs {
			lp := engine.TokenLogprob{Token: w, Bytes: []byte(w), Logprob: -0.5}
			for k := range req.TopLogprobs {
				lp.Top = append(lp.Top, engine.TopLogprob{Token: w, Bytes: []byte(w), Logprob: -0.5 - float32(k)})
			}
			lps = []engine.TokenLogprob{lp}
			res.Logprobs = append(res.Logprobs, lp)
		}
		if stream != nil {
			ev := engine.Event{Text: w, Logprobs: lps}
			if i == 0 {
				ev.First, ev.Timings = true, t
			}
			if err := stream(ev); err != nil {
				return engine.Result{}, err
			}
		}
	}
	t.GeneratedTokens = len(res.Tokens)
	res.Text, res.Timings = text.String(), t
	return res, nil
}

func (b *Backend) reply() string {
	if b.Reply == "" {
		return "Hello world"
	}
	return b.Reply
}

// promptTokens is the prompt of req in ByteTokens's vocabulary, messages
// rendered in ChatML.
func promptTokens(req engine.Request) []int {
	switch {
	case len(req.Tokens) > 0:
		return req.Tokens
	case req.Prompt != "":
		return Encode(req.Prompt, true)
	}
	return Encode(ChatML(req.Messages), true)
}

// ChatML renders msgs as the fake's chat template (ChatMLTemplate) does,
// with the generation prompt.
func ChatML(msgs []engine.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}
