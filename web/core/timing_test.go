package core

import (
	"net/http"
	"testing"
	"time"

	"kvwin/engine"
)

// The phases partition arrival → headers whatever the backend reports:
// its figures are taken in order while they fit before the first token,
// the rest is first_token, and the header spells them in milliseconds.
func TestTurnPhasesPartitionTheTurn(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name               string
		decoded            time.Duration // after t0; -1: never decoded
		called, first, at  time.Duration
		tm                 engine.Timings
		render, queue, pre time.Duration
		firstTok, decode   time.Duration
	}{
		{name: "embedded", decoded: 1 * ms, called: 2 * ms, first: 10 * ms, at: 12 * ms,
			tm:     engine.Timings{Render: 1 * ms, Tokenize: 0, Queue: 1 * ms, PromptEval: 4 * ms},
			render: 1 * ms, queue: 1 * ms, pre: 4 * ms, firstTok: 2 * ms, decode: 2 * ms},
		{name: "streamed", decoded: 1 * ms, called: 2 * ms, first: 10 * ms, at: 10 * ms,
			tm:  engine.Timings{PromptEval: 5 * ms},
			pre: 5 * ms, firstTok: 3 * ms},
		{name: "backend clock ahead", decoded: 1 * ms, called: 2 * ms, first: 4 * ms, at: 4 * ms,
			tm:     engine.Timings{Render: 1 * ms, PromptEval: 5 * ms},
			render: 1 * ms, pre: 1 * ms},
		{name: "not decoded", decoded: -1, called: 2 * ms, first: 3 * ms, at: 3 * ms, firstTok: 1 * ms},
		{name: "no first token", decoded: 1 * ms, called: 2 * ms, at: 5 * ms, firstTok: 3 * ms},
	} {
		t.Run(c.name, func(t *testing.T) {
			turn := &Turn{Start: t0}
			if c.decoded >= 0 {
				turn.Decoded = t0.Add(c.decoded)
			}
			var first time.Time
			if c.first > 0 {
				first = t0.Add(c.first)
			}
			p := TurnPhases(turn, t0.Add(c.called), first, t0.Add(c.at), c.tm)
			if p.Render != c.render || p.Queue != c.queue || p.Prefill != c.pre || p.FirstToken != c.firstTok || p.Decode != c.decode {
				t.Errorf("phases %+v", p)
			}
			var sum time.Duration
			p.Each(func(name string, d time.Duration) {
				if name != "total" {
					sum += d
				}
			})
			if sum != p.Total || p.Total != c.at {
				t.Errorf("phases add up to %v, total %v, want %v", sum, p.Total, c.at)
			}
		})
	}
	h := http.Header{}
	SetServerTiming(h, Phases{Read: 1500 * time.Microsecond, Total: 2 * ms})
	want := "read;dur=1.500, window;dur=0.000, render;dur=0.000, tokenize;dur=0.000, queue;dur=0.000, prefill;dur=0.000, first_token;dur=0.000, decode;dur=0.000, total;dur=2.000"
	if got := h.Get("Server-Timing"); got != want {
		t.Errorf("Server-Timing %q\nwant %q", got, want)
	}
}
