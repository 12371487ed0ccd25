package web

import (
	"context"
	"errors"
	"strings"
	"sync"

	"kvwin/engine"
)

// fakeBackend is a scripted engine.Backend that records the requests it
// gets. Set its script before the server serves; it is then only read.
type fakeBackend struct {
	info engine.Info

	events    []engine.Event // streamed, when the caller streams
	result    engine.Result  // returned on success
	err       error          // returned before any event
	errAfter  error          // returned after the events
	block     bool           // after the events, wait for the context to end
	panicWith any            // panic on entry with this value
	panicLate bool           // panic after the events instead

	entered   chan engine.Request // if set, every request is sent here on entry (buffer it)
	streamErr chan error          // if set, gets the error a StreamFunc returned (buffer it)
	hold      chan struct{}       // if set, after the events wait for it (or the context) before finishing

	started   chan struct{} // closed when Generate is first entered
	cancelled chan struct{} // closed when a blocked Generate sees its context end
	lateErr   chan error    // what the StreamFunc returned when called after that
	release   chan struct{} // closed at test cleanup: a blocked Generate gives up

	once sync.Once
	mu   sync.Mutex
	reqs []engine.Request
}

var _ engine.Backend = (*fakeBackend)(nil)

func newFake() *fakeBackend {
	return &fakeBackend{
		info:      engine.Info{Name: "fake-0", Model: "tiny", ContextSlot: 512, Slots: 2},
		started:   make(chan struct{}),
		cancelled: make(chan struct{}),
		lateErr:   make(chan error, 1),
		release:   make(chan struct{}),
	}
}

// script makes the fake stream events and return a result whose text is
// their concatenation, as the engine contract requires.
func (f *fakeBackend) script(finish string, t engine.Timings, events ...engine.Event) *fakeBackend {
	var text strings.Builder
	for _, ev := range events {
		text.WriteString(ev.Text)
	}
	f.events = events
	f.result = engine.Result{Text: text.String(), FinishReason: finish, Slot: 0, Timings: t}
	return f
}

func (f *fakeBackend) Info() engine.Info { return f.info }

func (f *fakeBackend) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	f.once.Do(func() { close(f.started) })
	if f.entered != nil {
		f.entered <- req
	}

	if f.panicWith != nil {
		panic(f.panicWith)
	}
	if f.err != nil {
		return engine.Result{}, f.err
	}
	if stream != nil {
		for _, ev := range f.events {
			if err := stream(ev); err != nil {
				if f.streamErr != nil {
					f.streamErr <- err
				}
				return engine.Result{}, err
			}
		}
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	if f.panicLate {
		panic("late boom")
	}
	if f.block {
		select {
		case <-ctx.Done():
		case <-f.release:
			// The test ended without the context being cancelled: fail
			// cleanly instead of hanging the server's Close.
			return engine.Result{}, errors.New("fake: released at cleanup, context never cancelled")
		}
		close(f.cancelled)
		if stream != nil {
			f.lateErr <- stream(engine.Event{Text: "late"})
		}
		return engine.Result{}, ctx.Err()
	}
	if f.errAfter != nil {
		return engine.Result{}, f.errAfter
	}
	return f.result, nil
}

// requests returns a copy of the requests received so far.
func (f *fakeBackend) requests() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.reqs...)
}

// firstEvent is the event that ends prefill.
func firstEvent(prompt, cached int) engine.Event {
	return engine.Event{First: true, Timings: engine.Timings{PromptTokens: prompt, CachedTokens: cached}}
}

// textEvent is one step of generated text.
func textEvent(text string) engine.Event { return engine.Event{Text: text} }

// engineTimings are the timings of a finished generation.
func engineTimings(prompt, cached, generated int) engine.Timings {
	return engine.Timings{PromptTokens: prompt, CachedTokens: cached, GeneratedTokens: generated}
}
