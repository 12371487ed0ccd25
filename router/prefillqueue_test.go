package router

import (
	"math"
	"testing"
	"time"

	"kvwin/engine"
)

// Prefills queue one after another at their predicted times; one that ends
// early moves those after it; with none left the wait is 0.
func TestPrefillQueueWaitsForThePromptWorkAhead(t *testing.T) {
	var q prefillQueue
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	first := q.enqueue(t0, ms(100))
	second := q.enqueue(t0, ms(100))
	steps := []struct {
		name string
		do   func()
		at   time.Duration
		want time.Duration
	}{
		{"two queued", func() {}, 0, ms(200)},
		{"the first ends 50 ms early", func() { q.finish(t0.Add(ms(50)), first) }, ms(50), ms(100)},
		{"a third after a pause", func() { q.enqueue(t0.Add(ms(400)), ms(30)) }, ms(400), ms(30)},
		{"the second ends late", func() { q.finish(t0.Add(ms(410)), second) }, ms(410), ms(20)},
	}
	for _, s := range steps {
		s.do()
		if got := q.wait(t0.Add(s.at)); got != s.want {
			t.Fatalf("%s: wait %v, want %v", s.name, got, s.want)
		}
	}
	q.finish(t0.Add(ms(420)), t0.Add(ms(430)))
	if got := q.wait(t0.Add(ms(420))); got != 0 {
		t.Fatalf("nothing queued: wait %v", got)
	}
}

// A turn beyond a backend's slots waits, for each request beyond them (its
// own included), for one of the slots to finish: the mean service time
// over the slots, at its 90th percentile under exponential service
// (ln 10 times the mean); within the slots it waits only for the prompt
// work ahead.
func TestSlotWaitIsCountedAtItsNinetiethPercentile(t *testing.T) {
	m := members(t, []engine.Info{{Name: "a", Slots: 4}}, nil, nil)[0]
	m.service.Store(math.Float64bits(2)) // 2 s a request
	p90 := func(mean float64) time.Duration { return time.Duration(math.Ln10 * mean * float64(time.Second)) }
	for _, tc := range []struct {
		inflight int
		want     time.Duration
	}{
		{3, 0},
		{4, p90(0.5)}, // the first of 4 busy slots frees after 0.5 s on average
		{5, p90(1.0)}, // and one more request is ahead of it
	} {
		m.load.Store(int64(tc.inflight))
		if got := m.wait(); got != tc.want {
			t.Errorf("%d in flight on 4 slots, 2 s each: wait %v, want %v", tc.inflight, got, tc.want)
		}
	}
}
