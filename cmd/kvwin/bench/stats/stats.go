// Package stats holds what the benches compute alike over their samples:
// the one definition of a quantile, so that "p50" means the same in every
// bench's table and JSON.
package stats

import (
	"math"
	"slices"
)

// Quantile is the q-quantile of xs (0 ≤ q ≤ 1; 0.5 is the median) by
// linear interpolation between order statistics: with xs sorted into
// s[0] ≤ … ≤ s[n-1], the quantile sits at position h = q·(n−1) and is
// s[⌊h⌋] + (h−⌊h⌋)·(s[⌊h⌋+1] − s[⌊h⌋]). This is Hyndman and Fan's type 7,
// the default of R and NumPy: the median of an even count is the mean of
// the middle two, q = 0 is the minimum and q = 1 the maximum, and a
// quantile need not be one of the values. It is NaN for no values. xs is
// not modified.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}
