// Package idle watches a remote backend's stream for silence: a server that
// stops sending mid-generation (hung, not closed) is cut off after a while
// instead of holding the request, and its slot in the router, forever.
package idle

import (
	"io"
	"sync/atomic"
	"time"
)

// Watchdog calls cancel once d passes without a Kick. The caller's own time
// (inside its stream callback) is not the server's silence, so it Pauses the
// watch around it. Safe for concurrent use.
type Watchdog struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

// New starts watching.
func New(d time.Duration, cancel func()) *Watchdog {
	w := &Watchdog{d: d}
	w.t = time.AfterFunc(d, func() {
		w.fired.Store(true)
		cancel()
	})
	return w
}

// Kick restarts the wait: the server said something.
func (w *Watchdog) Kick() { w.t.Reset(w.d) }

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
