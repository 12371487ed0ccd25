package attention

import (
	"errors"
	"fmt"
	"math"
)

// ErrTooFewObservations is returned by Fit when fewer valid observations
// than unknowns were given.
var ErrTooFewObservations = errors.New("attention: too few valid observations to fit")

// The fit minimises relative error, Σ ((y − ŷ)/y)², not absolute error:
// the router compares candidates whose prompts differ by orders of
// magnitude, and a 50 ms error matters on a 100 ms prefill but not on a
// 10 s one. It also bounds the pull of slow outliers (a prefill that was
// slowed by a neighbour can contribute a relative residual of at most 1),
// while no prefill can be much faster than the physics.
//
// Features are scaled (P in thousands, P·(C+P/2) in millions) so the
// entries of the 3×3 normal matrix stay within a few orders of magnitude of
// each other for prompts of ten to a million tokens.
const (
	scaleA = 1e3
	scaleB = 1e6
)

func features(p, c int) [3]float64 {
	fp := float64(p)
	return [3]float64{1, fp / scaleA, fp * (float64(c) + fp/2) / scaleB}
}

// normal holds the weighted normal equations XᵀWX β = XᵀWy of the relative
// least-squares problem, plus Σ w·y² to evaluate the objective, and the
// (weighted) count of observations. Its memory is fixed however many
// observations it has seen.
type normal struct {
	xx [3][3]float64
	xy [3]float64
	yy float64
	n  float64
}

// add accumulates o with weight weight (1 for a fresh observation).
func (s *normal) add(o Observation, weight float64) {
	y := o.Elapsed.Seconds()
	x := features(o.New, o.Context)
	w := weight / (y * y)
	for i := range 3 {
		for j := range 3 {
			s.xx[i][j] += w * x[i] * x[j]
		}
		s.xy[i] += w * x[i] * y
	}
	s.yy += w * y * y
	s.n += weight
}

// scale multiplies every sum by f: exponential forgetting.
func (s *normal) scale(f float64) {
	for i := range 3 {
		for j := range 3 {
			s.xx[i][j] *= f
		}
		s.xy[i] *= f
	}
	s.yy *= f
	s.n *= f
}

// solve returns the non-negative least-squares solution of the sums. With
// three unknowns it is exact and cheap to enumerate: the optimum of a convex
// quadratic over the non-negative orthant is the unconstrained optimum over
// the face spanned by its non-zero variables, so solving all 7 faces (and
// the origin), keeping the feasible ones and taking the lowest objective
// finds it. ok is false when no face with a variable is solvable (the
// sums are empty or carry no information).
func (s *normal) solve() (k Coefficients, ok bool) {
	best := s.yy // objective at β = 0
	var beta [3]float64
	for mask := 1; mask < 8; mask++ {
		b, solved := s.solveFace(mask)
		if !solved {
			continue
		}
		if f := s.objective(b); f < best {
			best, beta, ok = f, b, true
		}
	}
	return Coefficients{C0: beta[0], A: beta[1] / scaleA, B: beta[2] / scaleB}, ok
}

// objective is Σ w·(y − x·β)² expanded over the sums.
func (s *normal) objective(b [3]float64) float64 {
	f := s.yy
	for i := range 3 {
		f -= 2 * b[i] * s.xy[i]
		for j := range 3 {
			f += b[i] * s.xx[i][j] * b[j]
		}
	}
	return f
}

// solveFace solves the normal equations restricted to the variables in mask
// (bit i set: β_i free; clear: β_i = 0). It fails if the restricted system
// is singular or its solution has a negative component.
func (s *normal) solveFace(mask int) ([3]float64, bool) {
	var idx []int
	for i := range 3 {
		if mask&(1<<i) != 0 {
			idx = append(idx, i)
		}
	}
	n := len(idx)
	// Augmented matrix [A | b] of the restricted system.
	var m [3][4]float64
	scale := 0.0
	for r, i := range idx {
		for c, j := range idx {
			m[r][c] = s.xx[i][j]
			scale = math.Max(scale, math.Abs(m[r][c]))
		}
		m[r][n] = s.xy[i]
	}
	if scale == 0 {
		return [3]float64{}, false
	}
	// Gaussian elimination with partial pivoting; a pivot this small
	// relative to the matrix means two features moved together in every
	// observation (say, every prompt had the same length), so their split
	// is not determined by the data.
	const tiny = 1e-12
	for col := range n {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[piv][col]) {
				piv = r
			}
		}
		if math.Abs(m[piv][col]) <= tiny*scale {
			return [3]float64{}, false
		}
		m[col], m[piv] = m[piv], m[col]
		for r := range n {
			if r == col {
				continue
			}
			f := m[r][col] / m[col][col]
			for c := col; c <= n; c++ {
				m[r][c] -= f * m[col][c]
			}
		}
	}
	var b [3]float64
	for r, i := range idx {
		v := m[r][n] / m[r][r]
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return [3]float64{}, false
		}
		b[i] = v
	}
	return b, true
}

// Fit fits Coefficients to obs by non-negative relative least squares,
// every observation weighted alike. Observations with no new tokens or no
// elapsed time are skipped; fewer than three valid ones is an error.
func Fit(obs []Observation) (Coefficients, error) {
	var s normal
	for _, o := range obs {
		if o.valid() {
			s.add(o, 1)
		}
	}
	if s.n < 3 {
		return Coefficients{}, fmt.Errorf("%w: %d of %d", ErrTooFewObservations, int(s.n), len(obs))
	}
	k, ok := s.solve()
	if !ok {
		return Coefficients{}, fmt.Errorf("%w: no solvable fit over %d observations", ErrTooFewObservations, int(s.n))
	}
	return k, nil
}
