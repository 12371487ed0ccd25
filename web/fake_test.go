package web

import (
	"kvwin/engine"
	"kvwin/engine/enginetest"
)

// fakeBackend is enginetest's scripted fake. Set its script before the
// server serves; it is then only read.
type fakeBackend = enginetest.Backend

// newFake returns a fake with an empty script: no events and a zero
// result until a test scripts them (Script, or its fields). A blocked
// generation's context ending is followed by one late StreamFunc call,
// whose error goes to LateErr.
func newFake() *fakeBackend {
	f := enginetest.New(engine.Info{Name: "fake-0", Model: "tiny", ContextSlot: 512, Slots: 2})
	f.Events = []engine.Event{}
	f.LateErr = make(chan error, 1)
	return f
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
