package attention

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// grid times truth exactly over prompts and contexts spanning short
// continuations to long cold prompts.
func grid(truth Coefficients) []Observation {
	var obs []Observation
	for _, p := range []int{16, 64, 300, 1000, 4000} {
		for _, c := range []int{0, 500, 4000, 20000} {
			obs = append(obs, Observation{New: p, Context: c, Elapsed: truth.Predict(p, c)})
		}
	}
	return obs
}

func TestFitRecoversCoefficients(t *testing.T) {
	tests := []struct {
		name  string
		truth Coefficients
	}{
		{"test model on a CPU", tinyCPU},
		{"no overhead", Coefficients{A: 3e-4, B: 2e-7}},
		{"no attention term", Coefficients{C0: 0.02, A: 1e-4}},
		{"attention only", Coefficients{B: 5e-7}},
		{"GPU-like", Coefficients{C0: 0.05, A: 2e-6, B: 1e-9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Fit(grid(tc.truth))
			if err != nil {
				t.Fatal(err)
			}
			// Durations are whole nanoseconds, so allow their rounding.
			for _, pair := range [][2]float64{{got.C0, tc.truth.C0}, {got.A, tc.truth.A}, {got.B, tc.truth.B}} {
				if math.Abs(pair[0]-pair[1]) > 1e-6*math.Max(pair[1], 1e-6) {
					t.Fatalf("Fit = %+v, want %+v", got, tc.truth)
				}
			}
		})
	}
}

// TestFitIsOptimalNonNegative checks the Karush–Kuhn–Tucker conditions of
// non-negative least squares on noisy, awkward data: every coefficient is
// non-negative, the objective's gradient is zero along free coefficients
// and points outward (non-negative) at those held at zero.
func TestFitIsOptimalNonNegative(t *testing.T) {
	tests := []struct {
		name  string
		truth Coefficients // may be negative: the fit must not follow
		sigma float64
	}{
		{"noisy test model", tinyCPU, 0.3},
		{"negative overhead", Coefficients{C0: -0.01, A: 1e-3, B: 1e-7}, 0.05},
		{"negative per-token cost", Coefficients{C0: 0.5, A: -1e-5, B: 1e-7}, 0.05},
		{"very noisy", Coefficients{C0: 0.01, A: 1e-4, B: 1e-8}, 1.0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			var s normal
			var obs []Observation
			for range 40 {
				p, c := 1+rng.IntN(3000), rng.IntN(6000)
				y := tc.truth.Seconds(p, c) * math.Exp(tc.sigma*rng.NormFloat64())
				if y <= 0 {
					continue
				}
				o := Observation{New: p, Context: c, Elapsed: time.Duration(y * 1e9)}
				obs = append(obs, o)
				s.add(o, 1)
			}
			k, err := Fit(obs)
			if err != nil {
				t.Fatal(err)
			}
			if k.C0 < 0 || k.A < 0 || k.B < 0 {
				t.Fatalf("Fit = %+v has a negative coefficient", k)
			}
			beta := [3]float64{k.C0, k.A * scaleA, k.B * scaleB}
			for i := range 3 {
				g := -s.xy[i]
				for j := range 3 {
					g += s.xx[i][j] * beta[j]
				}
				// Relative to the gradient's natural size at β = 0.
				tol := 1e-6 * math.Abs(s.xy[i])
				if beta[i] > 0 && math.Abs(g) > tol || beta[i] == 0 && g < -tol {
					t.Errorf("coefficient %d = %g with gradient %g: not the non-negative optimum (fit %+v)", i, beta[i], g, k)
				}
			}
		})
	}
}

func TestFitNeedsObservations(t *testing.T) {
	ok := Observation{New: 100, Context: 10, Elapsed: 50 * time.Millisecond}
	bad := Observation{New: 0, Context: 10, Elapsed: 50 * time.Millisecond}
	tests := []struct {
		name string
		obs  []Observation
	}{
		{"none", nil},
		{"two", []Observation{ok, ok}},
		{"invalid ones do not count", []Observation{ok, ok, bad, bad}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Fit(tc.obs); !errors.Is(err, ErrTooFewObservations) {
				t.Errorf("Fit = %v, want ErrTooFewObservations", err)
			}
		})
	}
}

// Identical observations cannot split the time between the terms, but the
// fit must still reproduce them.
func TestFitDegenerateObservations(t *testing.T) {
	o := Observation{New: 500, Context: 1000, Elapsed: 200 * time.Millisecond}
	k, err := Fit([]Observation{o, o, o, o, o})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Predict(o.New, o.Context); got < o.Elapsed-time.Microsecond || got > o.Elapsed+time.Microsecond {
		t.Errorf("fit %+v predicts %v for the observed %v", k, got, o.Elapsed)
	}
}

func TestMAPE(t *testing.T) {
	truth := Coefficients{C0: 0.01, A: 1e-4, B: 1e-7}
	obs := grid(truth)
	tests := []struct {
		name string
		pr   Predictor
		obs  []Observation
		want float64
	}{
		{"exact", truth, obs, 0},
		{"10% high", Coefficients{C0: 0.011, A: 1.1e-4, B: 1.1e-7}, obs, 0.1},
		{"invalid observations skipped", truth, append([]Observation{{New: 0, Elapsed: time.Second}}, obs...), 0},
		{"one point, 50% low", Coefficients{A: 1e-3}, []Observation{{New: 1000, Elapsed: 2 * time.Second}}, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MAPE(tc.pr, tc.obs); math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("MAPE = %v, want %v", got, tc.want)
			}
		})
	}
	if got := MAPE(truth, nil); !math.IsNaN(got) {
		t.Errorf("MAPE of nothing = %v, want NaN", got)
	}
}

func TestPredictSaturates(t *testing.T) {
	k := Coefficients{A: 1e6}
	if got := k.Predict(1<<30, 1<<30); got != time.Duration(math.MaxInt64) {
		t.Errorf("Predict of an absurd prefill = %v, want the longest Duration", got)
	}
	if got := k.Predict(0, 100); got != 0 {
		t.Errorf("Predict of nothing = %v, want 0", got)
	}
}
