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

// eachHeld visits, ascending, exactly the entries of a list whose turn is
// one the search bounded itself to, whether it reads the list (a short
// one) or looks each bounded turn up (a long one), and candidateTurns
// lists the newest maxExamined of every stem's turns, ascending.
func TestBoundedTurnsAreVisitedInOrder(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for trial := 0; trial < 300; trial++ {
		limit := 1 + r.Intn(5000)
		x := &Index{post: map[string][]posting{}}
		var stems []string
		for s := 0; s < 1+r.Intn(4); s++ {
			stem := string(rune('a' + s))
			stems = append(stems, stem)
			share := r.Float64()
			for d := 0; d < limit+r.Intn(50); d++ { // some past the limit
				if r.Float64() < share {
					x.post[stem] = append(x.post[stem], posting{doc: int32(d), tf: 1})
				}
			}
		}
		var sb scoreboard
		sb.bounded = x.candidateTurns(&sb, stems, limit, nil)
		want := map[int32]bool{}
		for _, st := range stems {
			ps := x.postings(st, limit)
			for _, p := range ps[max(len(ps)-maxExamined, 0):] {
				want[p.doc] = true
			}
		}
		if len(sb.bounded) != len(want) || !slices.IsSorted(sb.bounded) {
			t.Fatalf("trial %d: %d bounded turns (sorted %v), want %d", trial, len(sb.bounded), slices.IsSorted(sb.bounded), len(want))
		}
		// A list the bounded turns were not drawn from, dense or sparse:
		// read through, or looked up turn by turn (bounded to few turns).
		var other []posting
		for d, share := 0, r.Float64(); d < limit+50; d++ {
			if r.Float64() < share {
				other = append(other, posting{doc: int32(d)})
			}
		}
		x.post["other"] = other
		for _, st := range append(stems, "other") {
			ps := x.post[st] // past the limit too, as passageScores reads its lists
			var got, exp []int
			sb.eachHeld(len(ps), func(i int) int32 { return ps[i].doc }, func(i int) { got = append(got, i) })
			for i, p := range ps {
				if want[p.doc] {
					exp = append(exp, i)
				}
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("trial %d, stem %s: visited %d entries, want %d", trial, st, len(got), len(exp))
			}
		}
		sb.reset(limit)
		for _, w := range sb.held {
			if w != 0 {
				t.Fatalf("trial %d: marks left after reset", trial)
			}
		}
	}
}
