package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	tests := []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{7}, 0.5, 7},
		{[]float64{7}, 0.99, 7},
		{[]float64{3, 1, 2}, 0.5, 2},      // unsorted input
		{[]float64{4, 1, 3, 2}, 0.5, 2.5}, // even count: mean of the middle two
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{10, 20, 30, 40, 50}, 0.9, 46}, // h = 3.6: 40 + 0.6·10
		{[]float64{0, 100}, 0.25, 25},
		{[]float64{5, 5, 5}, 0.9, 5},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.xs...)
		if got := Quantile(tt.xs, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Quantile(%v, %v) = %v; want %v", in, tt.q, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Fatalf("Quantile sorted its input: %v, was %v", tt.xs, in)
			}
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(nil) = %v; want NaN", got)
	}
}
