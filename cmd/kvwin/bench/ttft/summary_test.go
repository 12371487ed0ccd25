package ttft

import (
	"math"
	"reflect"
	"testing"

	"kvwin/attention"
)

// ramp returns turns 1..n with history 100·turn and the TTFTs given by
// ttft(turn).
func ramp(n int, ttft func(turn int) float64) []TurnResult {
	out := make([]TurnResult, n)
	for i := range out {
		out[i] = TurnResult{Turn: i + 1, HistoryTokens: 100 * (i + 1), TTFTMs: ttft(i + 1)}
	}
	return out
}

func TestPlateauRatio(t *testing.T) {
	// 21 turns: 20 counted (turn 1 is cold), a tenth is 2 turns. With a
	// budget of 750, turn 8 is the first over it, so the early tenth is
	// turns 9–10 and the late tenth turns 20–21.
	base := map[int]float64{1: 5000, 8: 900, 9: 10, 10: 20, 20: 30, 21: 36}
	at := func(m map[int]float64) func(int) float64 {
		return func(turn int) float64 {
			if v, ok := m[turn]; ok {
				return v
			}
			return 400 // anything not in the early or late tenth
		}
	}
	tests := []struct {
		name   string
		turns  []TurnResult
		budget int
		want   float64 // NaN: undefined
	}{
		{"early 9–10, late 20–21", ramp(21, at(base)), 750, 33.0 / 15},
		{"the history crosses at turn 2", ramp(21, at(map[int]float64{3: 8, 4: 12, 20: 40, 21: 40})), 150, 4},
		{"turn 1 over the budget alone is not counted", ramp(21, at(map[int]float64{3: 8, 4: 12, 20: 40, 21: 40})), 50, 4},
		// 25 turns: 24 counted, a tenth is ceil(2.4) = 3 turns: early 9–11,
		// late 23–25, medians of three.
		{"a tenth rounds up", ramp(25, at(map[int]float64{9: 10, 10: 50, 11: 20, 23: 100, 24: 30, 25: 1})), 750, 30.0 / 20},
		{"never over the budget", ramp(21, at(base)), 5000, math.NaN()},
		{"early tenth reaches the late one", ramp(21, at(base)), 1750, math.NaN()},
		{"early tenth just before the late one", ramp(21, at(map[int]float64{18: 10, 19: 10, 20: 25, 21: 25})), 1650, 2.5},
		{"zero early TTFT", ramp(21, at(map[int]float64{9: 0, 10: 0})), 750, math.NaN()},
		{"no turns", nil, 750, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := PlateauRatio(tt.turns, tt.budget)
			if math.IsNaN(tt.want) {
				if ok {
					t.Fatalf("ratio %v, want undefined", got)
				}
				return
			}
			if !ok || math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("ratio %v (ok %v), want %v", got, ok, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	// Prompt times that follow the cost model exactly: the fit must find it.
	truth := attention.Coefficients{C0: 0.004, A: 0.0003, B: 2e-8}
	var turns []TurnResult
	step := 0
	for turn := 1; turn <= 30; turn++ {
		p, c := 40+7*turn, 30*turn
		if turn%10 == 0 {
			step++
			p, c = 900, 100
		}
		turns = append(turns, TurnResult{Turn: turn, HistoryTokens: 60 * turn, PromptTokens: p + c, CachedTokens: c,
			NewTokens: p, TTFTMs: float64(turn), PromptMs: 1000 * truth.Seconds(p, c), Step: step})
	}
	turns[0].CachedTokens = 0 // turn 1: cold, and not counted
	turns[0].PromptMs = 1e6

	r := Summarize(Sink, turns, 1000)
	if r.Policy != Sink || len(r.Turns) != 30 || r.Evictions != 3 {
		t.Fatalf("policy %s, %d turns, %d evictions", r.Policy, len(r.Turns), r.Evictions)
	}
	var cached, prompt int
	for _, tr := range turns[1:] {
		cached += tr.CachedTokens
		prompt += tr.PromptTokens
	}
	if want := float64(cached) / float64(prompt); math.Abs(r.CachedShare-want) > 1e-12 {
		t.Fatalf("cached share %v, want %v", r.CachedShare, want)
	}
	if r.Fit == nil {
		t.Fatal("no fit")
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"c0", r.Fit.C0, truth.C0}, {"a", r.Fit.A, truth.A}, {"b", r.Fit.B, truth.B}} {
		if math.Abs(c.got-c.want) > 1e-3*c.want {
			t.Errorf("fit %s = %g, want %g", c.name, c.got, c.want)
		}
	}
	if r.PlateauRatio == nil {
		t.Fatal("no plateau ratio")
	}

	short := Summarize(Full, turns[:3], 1000)
	if short.Fit != nil || short.PlateauRatio != nil {
		t.Fatalf("two counted turns gave fit %+v, plateau %v; want both undefined", short.Fit, short.PlateauRatio)
	}
	if empty := Summarize(Full, nil, 1000); empty.Turns == nil || empty.CachedShare != 0 {
		t.Fatalf("no turns: %+v", empty)
	}
}

func TestTTFTQuantile(t *testing.T) {
	turns := ramp(5, func(turn int) float64 { return []float64{0, 999, 10, 40, 20, 30}[turn] })
	tests := []struct{ q, want float64 }{{0.5, 25}, {0, 10}, {1, 40}, {0.9, 37}}
	for _, tt := range tests {
		if got := TTFTQuantile(turns, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("q %v: %v, want %v", tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(TTFTQuantile(turns[:1], 0.5)) {
		t.Error("turn 1 alone has a median")
	}
}

// PromptRatio divides the late tenth's median TTFT by its median prompt
// time; turn 1 and the earlier turns do not count, and a server that
// reports no prompt time leaves it undefined.
func TestPromptRatio(t *testing.T) {
	var turns []TurnResult
	for i := 1; i <= 21; i++ { // 20 counted turns: the late tenth is turns 20 and 21
		turns = append(turns, TurnResult{Turn: i, TTFTMs: 100, PromptMs: 50})
	}
	turns[19].TTFTMs, turns[19].PromptMs = 6, 5
	turns[20].TTFTMs, turns[20].PromptMs = 12, 10
	if got, ok := PromptRatio(turns); !ok || math.Abs(got-9.0/7.5) > 1e-9 {
		t.Fatalf("PromptRatio = %v, %v; want %v (9 ms over 7.5 ms)", got, ok, 9.0/7.5)
	}
	for i := range turns {
		turns[i].PromptMs = 0
	}
	if got, ok := PromptRatio(turns); ok {
		t.Fatalf("no prompt times gave %v", got)
	}
	if _, ok := PromptRatio(turns[:1]); ok {
		t.Fatal("turn 1 alone gave a ratio")
	}
}

// LatePhases are the medians of PromptRatio's turns, each phase over the
// turns that report it, with outside as TTFT minus the total.
func TestLatePhases(t *testing.T) {
	var turns []TurnResult
	for i := 1; i <= 21; i++ { // the late tenth is turns 20 and 21
		turns = append(turns, TurnResult{Turn: i, TTFTMs: 100, Phases: map[string]float64{"window": 50, "total": 60}})
	}
	turns[19].TTFTMs, turns[19].Phases = 10, map[string]float64{"window": 1, "total": 8}
	turns[20].TTFTMs, turns[20].Phases = 12, map[string]float64{"window": 2, "read": 0.5, "total": 9}
	want := map[string]float64{"window": 1.5, "read": 0.5, "total": 8.5, "outside": 2.5}
	if got := LatePhases(turns); !reflect.DeepEqual(got, want) {
		t.Fatalf("LatePhases = %v, want %v", got, want)
	}
	for i := range turns {
		turns[i].Phases = nil
	}
	if got := LatePhases(turns); got != nil {
		t.Fatalf("no phases gave %v", got)
	}
	if got := LatePhases(nil); got != nil {
		t.Fatalf("no turns gave %v", got)
	}
}
