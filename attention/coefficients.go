package attention

import (
	"math"
	"time"
)

// Observation is one measured prefill on one backend.
type Observation struct {
	// New is P: prompt tokens the backend computed (not reused from cache).
	New int
	// Context is C: the KV cells the new tokens attended to besides
	// themselves. For a remote backend that is the conversation's cached
	// prefix. In the embedded engine every slot shares one KV cache and
	// attention runs over the cache's cells across all slots, so it is the
	// cache's used cells across slots when the prefill started. (llama.cpp
	// computes over every cell up to the highest used one, holes left by
	// removed cells included, so where the engine can report that span it
	// is the better C.)
	Context int
	// Elapsed is the measured prefill time (server prompt time, or time to
	// first token where that is all a backend reports).
	Elapsed time.Duration
}

// valid reports whether o can inform a fit: something was computed and
// took time.
func (o Observation) valid() bool {
	return o.New > 0 && o.Context >= 0 && o.Elapsed > 0
}

// Coefficients are the terms of the prefill time model
//
//	t ≈ C0 + A·P + B·P·(C + P/2)   (seconds)
//
// C0 is fixed per-request overhead, A the per-token (weights) cost and B the
// per-(token, attended cell) attention cost. The JSON names are those of
// `kvwin bench ttft`'s fit object.
type Coefficients struct {
	C0 float64 `json:"c0"` // seconds
	A  float64 `json:"a"`  // seconds per new token
	B  float64 `json:"b"`  // seconds per new token per attended token
}

// Seconds is the predicted prefill time of p new tokens attending to cached
// cells besides themselves.
func (k Coefficients) Seconds(p, cached int) float64 {
	if p <= 0 {
		return 0
	}
	fp := float64(p)
	return k.C0 + k.A*fp + k.B*fp*(float64(max(cached, 0))+fp/2)
}

// Predict is Seconds as a Duration.
func (k Coefficients) Predict(p, cached int) time.Duration {
	return seconds(k.Seconds(p, cached))
}

// seconds converts to a Duration, saturating instead of overflowing.
func seconds(s float64) time.Duration {
	ns := s * 1e9
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// Predictor predicts prefill time: Coefficients and *Calibration satisfy it.
type Predictor interface {
	Predict(p, cached int) time.Duration
}

var (
	_ Predictor = Coefficients{}
	_ Predictor = (*Calibration)(nil)
)

// MAPE is the mean absolute percentage error of pr on obs, as a fraction
// (0.25 is 25%). Invalid observations are skipped; with none left it is NaN.
func MAPE(pr Predictor, obs []Observation) float64 {
	sum, n := 0.0, 0
	for _, o := range obs {
		if !o.valid() {
			continue
		}
		got := pr.Predict(o.New, o.Context).Seconds()
		want := o.Elapsed.Seconds()
		sum += math.Abs(got-want) / want
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}
