package core

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"kvwin/engine"
)

// The phases of a turn, in the order they happen. They partition the time
// from the request's arrival to its answer's headers, so they add up to
// total (see docs/http.md, Server-Timing):
//
//   - read: the body received and decoded (from the arrival);
//   - window: the window cut, the memory, the backend chosen, until the
//     request is handed to the backend;
//   - render, tokenize: the backend's rendering of the prompt, and its
//     tokenizer's time on text no cache held (backends that say);
//   - queue: from the prompt's tokens to its slot;
//   - prefill: the prompt decode (X-Kvwin-Prompt-Ms);
//   - first_token: the rest until the first token (placement, sampling,
//     the hand-off back);
//   - decode: after the first token until the answer, non-streamed only
//     (a streamed answer's headers go out with the first token).
var PhaseNames = []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode", PhaseTotal}

// PhaseTotal names the sum of the phases, the last of PhaseNames.
const PhaseTotal = "total"

// Phases are a turn's phase durations, by PhaseNames.
type Phases struct {
	Read, Window, Render, Tokenize, Queue, Prefill, FirstToken, Decode, Total time.Duration
}

// TurnPhases splits the turn t from its arrival to at (when the headers go
// out): called is when the backend was handed the request, first when the
// first token came (zero: at), tm the backend's timings. A phase the
// backend's figures would make negative (they are its own clock) is zero
// and the remainder goes to first_token, so the phases still add up.
func TurnPhases(t *Turn, called, first, at time.Time, tm engine.Timings) Phases {
	start := t.Start
	if start.IsZero() {
		start = called
	}
	read := t.Decoded
	if read.IsZero() || read.Before(start) || read.After(called) {
		read = start
	}
	if first.IsZero() || first.After(at) {
		first = at
	}
	p := Phases{Read: read.Sub(start), Window: called.Sub(read), Decode: at.Sub(first), Total: at.Sub(start)}
	left := max(first.Sub(called), 0)
	for _, d := range []struct {
		into *time.Duration
		v    time.Duration
	}{{&p.Render, tm.Render}, {&p.Tokenize, tm.Tokenize}, {&p.Queue, tm.Queue}, {&p.Prefill, tm.PromptEval}} {
		*d.into = min(max(d.v, 0), left)
		left -= *d.into
	}
	p.FirstToken = left
	return p
}

// Each calls f with every phase's name and duration, total last.
func (p Phases) Each(f func(name string, d time.Duration)) {
	for i, d := range []time.Duration{p.Read, p.Window, p.Render, p.Tokenize, p.Queue, p.Prefill, p.FirstToken, p.Decode, p.Total} {
		f(PhaseNames[i], d)
	}
}

// SetServerTiming writes p as a Server-Timing header
// (`read;dur=0.12, window;dur=0.05, …, total;dur=4.31`, milliseconds).
func SetServerTiming(h http.Header, p Phases) {
	var b strings.Builder
	p.Each(func(name string, d time.Duration) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(float64(d.Nanoseconds())/1e6, 'f', 3, 64))
	})
	h.Set("Server-Timing", b.String())
}
