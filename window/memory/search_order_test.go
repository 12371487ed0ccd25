package memory

import (
	"math/rand"
	"slices"
	"testing"
)

// The walk reads candidates in rankOrder however far it reads, and rank's
// selection keeps the best maxExamined: the same as sorting them all.
func TestCandidatesAreReadInRankOrder(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for trial := 0; trial < 200; trial++ {
		n := r.Intn(3000)
		xs := make([]cand, n)
		for i := range xs {
			// Few distinct scores: ties broken by weak and doc.
			xs[i] = cand{doc: int32(r.Intn(1 << 20)), score: float64(r.Intn(20)), weak: r.Intn(4) == 0}
		}
		want := slices.Clone(xs)
		slices.SortFunc(want, rankOrder)
		k := r.Intn(n + 2)
		best := selectFirst(slices.Clone(xs), k, byRank)
		slices.SortFunc(best, rankOrder)
		if w := want[:min(k, n)]; !slices.Equal(best, w) {
			t.Fatalf("n %d, k %d: the first %d selected differ from the sort's", n, k, len(w))
		}
		// topK keeps k of the highest scores, ties in any order.
		top := topK(slices.Clone(xs), k)
		if len(top) != min(k, n) {
			t.Fatalf("n %d, k %d: topK kept %d", n, k, len(top))
		}
		var kept, all []float64
		for _, c := range top {
			kept = append(kept, c.score)
		}
		for _, c := range xs {
			all = append(all, c.score)
		}
		slices.Sort(kept)
		slices.Sort(all)
		slices.Reverse(all)
		if w := all[:len(kept)]; !slices.Equal(kept, slices.Sorted(slices.Values(w))) {
			t.Fatalf("n %d, k %d: topK's scores are not the %d highest", n, k, len(kept))
		}
		o := inOrder{xs: slices.Clone(xs)}
		read := r.Intn(n + 1)
		for i := 0; i < read; i++ {
			if c := o.at(i); c != want[i] {
				t.Fatalf("n %d: candidate %d read as %+v, want %+v", n, i, c, want[i])
			}
		}
		rest := slices.Clone(o.xs[read:])
		slices.SortFunc(rest, rankOrder)
		if !slices.Equal(rest, want[read:]) {
			t.Fatalf("n %d: the %d not read are not the rest", n, n-read)
		}
	}
}
