package app_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/wire"
)

// serverTiming reads a Server-Timing header's durations by name.
func serverTiming(t *testing.T, v string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, metric := range strings.Split(v, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(metric), ";dur=")
		if !ok {
			t.Fatalf("Server-Timing metric %q has no dur", metric)
		}
		d, err := strconv.ParseFloat(dur, 64)
		if err != nil {
			t.Fatalf("Server-Timing metric %q: %v", metric, err)
		}
		out[name] = d
	}
	return out
}

// Every generation, streamed or not, says in Server-Timing where its time
// went: the phases add up to the total (within 1 ms), the total is within
// what the client measured, prefill is X-Kvwin-Prompt-Ms, and each phase is
// observed in kvwin_turn_phase_seconds on /metrics.
func TestServerTimingPhasesAddUpToTheTotal(t *testing.T) {
	a := apptest.Start(t, nil)
	msgs := apptest.Msgs("system", apptest.Words(1, 200), "user", apptest.Words(2, 40))
	turns := 0
	for _, stream := range []bool{false, true, false, true} {
		tr := apptest.Post(t, a, map[string]any{"messages": msgs, "max_tokens": 3, "stream": stream})
		if tr.Status != 200 {
			t.Fatalf("status %d: %s", tr.Status, tr.Body)
		}
		turns++
		p := serverTiming(t, tr.Header.Get("Server-Timing"))
		sum := 0.0
		for _, name := range []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode"} {
			d, ok := p[name]
			if !ok || d < 0 {
				t.Fatalf("stream %v: phase %s = %v, %v in %q", stream, name, d, ok, tr.Header.Get("Server-Timing"))
			}
			sum += d
		}
		if math.Abs(sum-p["total"]) > 1 {
			t.Errorf("stream %v: phases add up to %.3f ms, total %.3f ms", stream, sum, p["total"])
		}
		if client := float64(tr.TTFT.Microseconds()) / 1000; p["total"] > client+0.01 {
			t.Errorf("stream %v: total %.3f ms, longer than the client's %.3f ms", stream, p["total"], client)
		}
		if stream && p["decode"] != 0 {
			t.Errorf("streamed: decode %.3f ms in headers sent with the first token", p["decode"])
		}
		if promptMs := wire.ReadGeneration(tr.Header).PromptMs; math.Abs(p["prefill"]-promptMs) > 0.002 {
			t.Errorf("stream %v: prefill %.3f ms, X-Kvwin-Prompt-Ms %.3f", stream, p["prefill"], promptMs)
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": tr.Content}, map[string]string{"role": "user", "content": apptest.Words(3+turns, 30)})
	}
	text := scrape(t, a)
	for _, phase := range []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode", "total"} {
		if v := sample(text, `kvwin_turn_phase_seconds_count\{phase="`+phase+`"\}`); v != float64(turns) {
			t.Errorf("kvwin_turn_phase_seconds_count{phase=%q} = %v, want %d", phase, v, turns)
		}
	}
	if v := sample(text, `kvwin_turn_phase_seconds_sum\{phase="prefill"\}`); !(v > 0) {
		t.Errorf("prefill sum %v, want the prefills' time", v)
	}
}
