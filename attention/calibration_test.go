package attention

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// tinyPrior is what a router would start the recorded model's calibration
// with: FLOPs at an assumed 50 GFLOP/s. It is only roughly right, as any
// prior is: on the recording its per-token term is about right and its
// attention term about 3× low (CPU attention without flash attention runs
// far below the matrix-multiply rate).
func tinyPrior(t testing.TB) Coefficients {
	t.Helper()
	c, err := NewCost(recordedShape, "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Prior(5e10)
}

func newCalibration(t testing.TB, cfg CalibrationConfig) *Calibration {
	t.Helper()
	if cfg.Prior == (Coefficients{}) {
		cfg.Prior = tinyPrior(t)
	}
	c, err := NewCalibration(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCalibrationPredictsHeldOutTurns is the acceptance test of issue 6 on
// synthetic timings: calibrated online on half the turns of a conversation,
// the model predicts the other half's prefill times within 25% MAPE.
func TestCalibrationPredictsHeldOutTurns(t *testing.T) {
	tests := []struct {
		name  string
		truth Coefficients
		sigma float64
		turns int
		seed  uint64
	}{
		{"test model on a CPU, 10% noise", tinyCPU, 0.10, 120, 1},
		{"test model on a CPU, 20% noise", tinyCPU, 0.20, 120, 2},
		{"short run, 15% noise", tinyCPU, 0.15, 30, 3},
		// Attention-heavy: b ten times larger, as without flash attention on
		// a wide model.
		{"attention-heavy backend", Coefficients{C0: 0.01, A: 1e-4, B: 3e-6}, 0.15, 120, 4},
		// A GPU-like backend: big fixed overhead, cheap tokens.
		{"overhead-dominated backend", Coefficients{C0: 0.05, A: 2e-6, B: 1e-9}, 0.15, 120, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			train, test := halves(conversationTurns(tc.truth, tc.sigma, tc.turns, tc.seed))
			c := newCalibration(t, CalibrationConfig{})
			for _, o := range train {
				if err := c.Observe(o); err != nil {
					t.Fatal(err)
				}
			}
			got := MAPE(c, test)
			floor := MAPE(tc.truth, test) // the noise alone
			t.Logf("held-out MAPE %.1f%% (truth itself: %.1f%%), fit %+v, truth %+v", 100*got, 100*floor, c.Coefficients(), tc.truth)
			if got > 0.25 {
				t.Errorf("held-out MAPE %.1f%%, want ≤ 25%%", 100*got)
			}
			if !c.Stats().Fitted {
				t.Error("calibration still on its prior after the training half")
			}
		})
	}
}

// TestPriorAloneMissesHeldOutTurns shows the 25% bound discriminates: the
// FLOPs prior, uncalibrated, is far off on the same workload.
func TestPriorAloneMissesHeldOutTurns(t *testing.T) {
	_, test := halves(conversationTurns(tinyCPU, 0.10, 120, 1))
	if got := MAPE(tinyPrior(t), test); got <= 0.25 {
		t.Errorf("prior alone has held-out MAPE %.1f%%; the acceptance bound would not tell a fit from a guess", 100*got)
	}
}

func TestCalibrationFallsBackToPrior(t *testing.T) {
	prior := tinyPrior(t)
	c := newCalibration(t, CalibrationConfig{Prior: prior, MinObservations: 6})
	obs := conversationTurns(tinyCPU, 0, 6, 7)
	for i, o := range obs {
		st := c.Stats()
		if st.Fitted || c.Coefficients() != prior || c.Predict(1000, 500) != prior.Predict(1000, 500) {
			t.Fatalf("after %d observations: fitted %v, coefficients %+v; want the prior %+v", i, st.Fitted, c.Coefficients(), prior)
		}
		if err := c.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if !st.Fitted || st.Observations != 6 {
		t.Fatalf("after 6 observations: %+v, want fitted", st)
	}
	// Noise-free observations: the fit must reproduce them.
	if got := MAPE(c, obs); got > 1e-6 {
		t.Errorf("fit on noise-free data has MAPE %g; coefficients %+v, truth %+v", got, c.Coefficients(), tinyCPU)
	}
}

func TestCalibrationRejectsBadObservations(t *testing.T) {
	tests := []struct {
		name string
		o    Observation
	}{
		{"no new tokens", Observation{New: 0, Context: 10, Elapsed: time.Second}},
		{"negative new tokens", Observation{New: -5, Context: 10, Elapsed: time.Second}},
		{"negative context", Observation{New: 5, Context: -1, Elapsed: time.Second}},
		{"no elapsed time", Observation{New: 5, Context: 10}},
		{"negative elapsed time", Observation{New: 5, Elapsed: -time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalibration(t, CalibrationConfig{})
			if err := c.Observe(tc.o); !errors.Is(err, ErrBadObservation) {
				t.Fatalf("Observe(%+v) = %v, want ErrBadObservation", tc.o, err)
			}
			if st := c.Stats(); st.Observations != 0 || st.Weight != 0 {
				t.Errorf("a rejected observation was counted: %+v", st)
			}
		})
	}
}

func TestNewCalibrationValidates(t *testing.T) {
	ok := Coefficients{A: 1e-4, B: 1e-7}
	tests := []struct {
		name string
		cfg  CalibrationConfig
		ok   bool
	}{
		{"defaults", CalibrationConfig{Prior: ok}, true},
		{"attention-only prior", CalibrationConfig{Prior: Coefficients{B: 1e-7}}, true},
		{"no prior", CalibrationConfig{}, false},
		{"overhead-only prior", CalibrationConfig{Prior: Coefficients{C0: 0.1}}, false},
		{"negative prior", CalibrationConfig{Prior: Coefficients{A: -1e-4, B: 1e-7}}, false},
		{"NaN prior", CalibrationConfig{Prior: Coefficients{A: math.NaN()}}, false},
		{"infinite prior", CalibrationConfig{Prior: Coefficients{A: math.Inf(1)}}, false},
		{"min observations below unknowns", CalibrationConfig{Prior: ok, MinObservations: 2}, false},
		{"negative half-life", CalibrationConfig{Prior: ok, HalfLife: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCalibration(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewCalibration(%+v) error %v, want ok %v", tc.cfg, err, tc.ok)
			}
		})
	}
}

// TestCalibrationTracksDrift: when a backend becomes twice as slow (another
// tenant, a thermal limit), a short half-life follows within 12 half-lives
// (see CalibrationConfig.HalfLife), where a long memory still averages old
// and new.
func TestCalibrationTracksDrift(t *testing.T) {
	slow := Coefficients{C0: 2 * tinyCPU.C0, A: 2 * tinyCPU.A, B: 2 * tinyCPU.B}
	before := conversationTurns(tinyCPU, 0.05, 400, 11)
	after := conversationTurns(slow, 0.05, 384, 12) // 12 half-lives of 32
	test := conversationTurns(slow, 0, 60, 13)
	tests := []struct {
		name     string
		halfLife int
		maxMAPE  float64
		minMAPE  float64
	}{
		{"half-life 32 follows", 32, 0.02, 0},
		{"half-life 100000 lags", 100000, math.Inf(1), 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalibration(t, CalibrationConfig{HalfLife: tc.halfLife})
			for _, o := range append(append([]Observation(nil), before...), after...) {
				if err := c.Observe(o); err != nil {
					t.Fatal(err)
				}
			}
			got := MAPE(c, test)
			t.Logf("MAPE against the new speed %.1f%%", 100*got)
			if got > tc.maxMAPE || got < tc.minMAPE {
				t.Errorf("MAPE against the new speed %.1f%%, want in [%.0f%%, %.0f%%]", 100*got, 100*tc.minMAPE, 100*tc.maxMAPE)
			}
		})
	}
}

// TestCalibrationStatsError: the out-of-sample error reported by Stats is
// about the noise once calibrated, and large while the prior is wrong.
func TestCalibrationStatsError(t *testing.T) {
	c := newCalibration(t, CalibrationConfig{HalfLife: 64})
	obs := conversationTurns(tinyCPU, 0.10, 400, 21)
	for _, o := range obs[:6] {
		if err := c.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	early := c.Stats().Error
	for _, o := range obs[6:] {
		if err := c.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	late := c.Stats().Error
	t.Logf("out-of-sample error: %.1f%% on the prior, %.1f%% calibrated", 100*early, 100*late)
	if early < 0.25 || late > 0.15 || late < 0.03 {
		t.Errorf("error %.1f%% on the prior (want ≥ 25%%), %.1f%% calibrated (want 3–15%% for 10%% noise)", 100*early, 100*late)
	}
}

// TestCalibrationConcurrent runs Observe and Predict from many goroutines;
// run it with -race.
func TestCalibrationConcurrent(t *testing.T) {
	c := newCalibration(t, CalibrationConfig{})
	obs := conversationTurns(tinyCPU, 0.1, 200, 31)
	const writers, readers = 4, 4
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(obs); i += writers {
				if err := c.Observe(obs[i]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if d := c.Predict(1+i%4000, i%8000); d <= 0 {
					t.Errorf("Predict gave %v", d)
					return
				}
				_ = c.Stats()
			}
		}()
	}
	wg.Wait()
	if st := c.Stats(); st.Observations != len(obs) || !st.Fitted {
		t.Fatalf("after concurrent observing: %+v, want %d observations, fitted", st, len(obs))
	}
	if got := MAPE(c, obs); got > 0.15 {
		t.Errorf("MAPE after concurrent calibration %.1f%%", 100*got)
	}
}

func BenchmarkCalibrationPredict(b *testing.B) {
	c := newCalibration(b, CalibrationConfig{})
	for _, o := range conversationTurns(tinyCPU, 0.1, 100, 41) {
		_ = c.Observe(o)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_ = c.Predict(64+i&1023, 4096)
			i++
		}
	})
}

func BenchmarkCalibrationObserve(b *testing.B) {
	c := newCalibration(b, CalibrationConfig{})
	obs := conversationTurns(tinyCPU, 0.1, 1000, 42)
	b.ReportAllocs()
	for i := range b.N {
		_ = c.Observe(obs[i%len(obs)])
	}
}
