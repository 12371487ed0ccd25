package kvcache

import "testing"

func TestSharedPrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []int
		want int
	}{
		{"empty", nil, []int{1}, 0},
		{"first differs", []int{1, 2}, []int{2, 2}, 0},
		{"one is a prefix", []int{1, 2}, []int{1, 2, 3}, 2},
		{"equal", []int{4, 5, 6}, []int{4, 5, 6}, 3},
		// Not chained: a later equal element does not count.
		{"equal again after a gap", []int{1, 9, 3}, []int{1, 2, 3}, 1},
	} {
		if got := SharedPrefix(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: SharedPrefix = %d, want %d", tc.name, got, tc.want)
		}
		if got := SharedPrefix(tc.b, tc.a); got != tc.want {
			t.Errorf("%s: SharedPrefix reversed = %d, want %d", tc.name, got, tc.want)
		}
	}
}
