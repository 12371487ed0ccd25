package attention

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBadObservation is returned by Calibration.Observe for an observation
// that cannot inform a fit.
var ErrBadObservation = errors.New("attention: observation has no new tokens, negative context or no elapsed time")

// CalibrationConfig configures a Calibration. Zero fields take the defaults
// of DefaultCalibrationConfig, except Prior, which has no default: it
// depends on the model and the hardware (see Cost.Prior).
type CalibrationConfig struct {
	// Prior is what Predict returns until MinObservations observations have
	// been seen, typically Cost.Prior(assumed FLOP/s).
	Prior Coefficients
	// MinObservations is how many observations the fit needs before it
	// replaces the prior: twice the unknowns by default, so that one odd
	// prefill cannot decide the model alone.
	MinObservations int
	// HalfLife is the number of observations after which an observation
	// counts half. Backends drift (other tenants, thermal limits, a model
	// reload); a half-life in observations rather than in time keeps an
	// idle backend's fit, since idleness says nothing new about its speed.
	// The default, 100, keeps about 145 observations' worth of evidence:
	// plenty for three unknowns. After a step change in speed the fit takes
	// about 12 half-lives, not 1, to be within a few percent again: under
	// squared relative error an old observation off by 2× outweighs
	// hundreds of fresh ones with 5% noise, so it must decay that far first.
	// (Sudden contention is better seen by the router's load signals than
	// by this model of the backend's speed.)
	HalfLife int
}

// DefaultCalibrationConfig returns the defaults (with no Prior).
func DefaultCalibrationConfig() CalibrationConfig {
	return CalibrationConfig{MinObservations: 6, HalfLife: 100}
}

func (c CalibrationConfig) withDefaults() CalibrationConfig {
	d := DefaultCalibrationConfig()
	if c.MinObservations == 0 {
		c.MinObservations = d.MinObservations
	}
	if c.HalfLife == 0 {
		c.HalfLife = d.HalfLife
	}
	return c
}

func (c CalibrationConfig) validate() error {
	p := c.Prior
	switch {
	case p.C0 < 0 || p.A < 0 || p.B < 0 || math.IsNaN(p.C0+p.A+p.B) || math.IsInf(p.C0+p.A+p.B, 0):
		return fmt.Errorf("attention: prior %+v has a negative or non-finite coefficient", p)
	case p.A == 0 && p.B == 0:
		return fmt.Errorf("attention: prior %+v has no per-token cost", p)
	case c.MinObservations < 3:
		return fmt.Errorf("attention: min observations %d below the 3 unknowns", c.MinObservations)
	case c.HalfLife < 1:
		return fmt.Errorf("attention: half-life %d below 1 observation", c.HalfLife)
	}
	return nil
}

// Calibration predicts one backend's prefill time from its own observed
// timings: t ≈ c₀ + a·P + b·P·(C + P/2), fitted by non-negative relative
// least squares (see Fit), with older observations decaying exponentially.
//
// Memory is fixed: it keeps the decayed normal-equation sums (a 3×3 matrix
// and a few scalars), not the observations. That was chosen over a sliding
// window of observations because each update is O(1) with nothing to evict,
// and forgetting is gradual rather than a cliff at the window's edge. The
// cost is that a long run of alike prefills (say, only short continuation
// turns) slowly fades what older, varied ones taught; the fit then rests on
// the directions the recent data still determine (see normal.solve).
//
// A Calibration is safe for concurrent use. Predict never blocks: it reads
// the current coefficients through an atomic pointer. Observe serialises
// with other Observe calls on a short lock and refits in well under a
// microsecond.
type Calibration struct {
	cfg    CalibrationConfig
	decay  float64 // weight factor per new observation
	active atomic.Pointer[Coefficients]

	mu       sync.Mutex // guards everything below
	sums     normal
	seen     int     // observations accepted, undecayed
	errSum   float64 // decayed Σ |predicted − observed| / observed, predicted before observing
	errCount float64
	fitted   bool
}

// NewCalibration returns a Calibration predicting cfg.Prior until it has
// observations enough.
func NewCalibration(cfg CalibrationConfig) (*Calibration, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Calibration{cfg: cfg, decay: math.Exp2(-1 / float64(cfg.HalfLife))}
	prior := cfg.Prior
	c.active.Store(&prior)
	return c, nil
}

// Predict returns the predicted prefill time of p new tokens attending to
// cached cells. It does not block and allocates nothing.
func (c *Calibration) Predict(p, cached int) time.Duration {
	return c.active.Load().Predict(p, cached)
}

// Coefficients returns the coefficients Predict uses now.
func (c *Calibration) Coefficients() Coefficients {
	return *c.active.Load()
}

// Observe adds one measured prefill and refits. It blocks only on other
// Observe and Stats calls.
func (c *Calibration) Observe(o Observation) error {
	if !o.valid() {
		return fmt.Errorf("%w: %+v", ErrBadObservation, o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Score the prediction this observation would have had: an honest,
	// out-of-sample error, since the observation is not yet in the fit.
	y := o.Elapsed.Seconds()
	e := math.Abs(c.active.Load().Seconds(o.New, o.Context)-y) / y
	c.errSum = c.errSum*c.decay + e
	c.errCount = c.errCount*c.decay + 1

	c.sums.scale(c.decay)
	c.sums.add(o, 1)
	c.seen++
	if c.seen < c.cfg.MinObservations {
		return nil
	}
	if k, ok := c.sums.solve(); ok {
		c.active.Store(&k)
		c.fitted = true
	}
	return nil
}

// CalibrationStats describes a Calibration's state.
type CalibrationStats struct {
	Coefficients Coefficients `json:"coefficients"`
	// Fitted is false while Predict still returns the prior.
	Fitted bool `json:"fitted"`
	// Observations counts every accepted observation; Weight is their
	// decayed count, what the fit rests on.
	Observations int     `json:"observations"`
	Weight       float64 `json:"weight"`
	// Error is the decayed mean absolute percentage error (as a fraction)
	// of each prediction made before its observation arrived: how well the
	// model forecasts this backend, measured out of sample.
	Error float64 `json:"error"`
}

// Stats returns a snapshot of the calibration. It blocks on Observe.
func (c *Calibration) Stats() CalibrationStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := CalibrationStats{
		Coefficients: *c.active.Load(), Fitted: c.fitted,
		Observations: c.seen, Weight: c.sums.n,
	}
	if c.errCount > 0 {
		st.Error = c.errSum / c.errCount
	}
	return st
}
