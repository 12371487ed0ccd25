// Package idle watches a remote backend's stream for silence: a server that
// accepts a generation and never answers, or stops sending mid-generation
// (hung, not closed), is cut off after a while instead of holding the
// request, and its slot in the router, forever.
//
// Two bounds apply, one after the other: until the first token, the whole
// wait (the server's queue and prefill included) is bounded by the
// first-token timeout, and bytes that arrive before it (headers, keep-alive
// comments) do not extend it; after the first token, each silence between
// bytes is bounded by the idle timeout. Bounds checks and defaults these
// and the adapters' two other time bounds (a metadata call, a connection)
// in one place.
package idle

import (
	"io"
	"sync/atomic"
	"time"
)

// Watchdog calls cancel once the first token has not come within its
// first-token timeout, or, after it, once the idle timeout passes without a
// Kick. The caller's own time (inside its stream callback) is not the
// server's silence, so it Pauses the watch around it. Safe for concurrent
// use.
type Watchdog struct {
	idle    time.Duration
	t       *time.Timer
	started atomic.Bool
	fired   atomic.Bool
}

// New starts watching: the first token must come within first.
func New(first, idle time.Duration, cancel func()) *Watchdog {
	w := &Watchdog{idle: idle}
	w.t = time.AfterFunc(first, func() {
		w.fired.Store(true)
		cancel()
	})
	return w
}

// Started says the first token came: from now on silence is bounded by the
// idle timeout. Safe to call more than once.
func (w *Watchdog) Started() {
	if !w.started.Swap(true) {
		w.t.Reset(w.idle)
	}
}

// Kick restarts the idle wait: the server said something. Before Started
// it does nothing: the first-token timeout bounds the whole wait.
func (w *Watchdog) Kick() {
	if w.started.Load() {
		w.t.Reset(w.idle)
	}
}

// Pause stops the wait until the next Kick.
func (w *Watchdog) Pause() { w.t.Stop() }

// Stop ends the watch.
func (w *Watchdog) Stop() { w.t.Stop() }

// Fired reports whether the watchdog cancelled the generation.
func (w *Watchdog) Fired() bool { return w.fired.Load() }

// Reader kicks its watchdog whenever bytes arrive.
type Reader struct {
	R io.Reader
	W *Watchdog
}

func (k Reader) Read(p []byte) (int, error) {
	n, err := k.R.Read(p)
	if n > 0 {
		k.W.Kick()
	}
	return n, err
}
