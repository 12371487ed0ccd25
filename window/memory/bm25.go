package memory

import "math"

// BM25 parameters: the usual defaults (Robertson and Zaragoza 2009), the same
// as SQLite FTS5's bm25().
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// matched is a candidate turn found by its terms.
type matched struct {
	turn   Turn
	terms  map[string]int // term frequencies of the query terms it holds
	length int            // all its terms
}

// newMatched counts the query terms in a turn.
func newMatched(t Turn, query map[string]bool) matched {
	m := matched{turn: t, terms: map[string]int{}}
	for _, term := range terms(t.Text) {
		m.length++
		if query[term] {
			m.terms[term]++
		}
	}
	return m
}

// bm25 scores candidates for query terms. n and avgLen describe the whole
// candidate collection (not just the matches), so scores are the
// conversation's own: they never depend on another conversation's turns,
// which keeps packets replica-safe and tenants' statistics apart. cands must
// hold every candidate that contains any query term, so document frequencies
// can be counted from it exactly.
func bm25(cands []matched, query []string, n int, avgLen float64) []float64 {
	df := map[string]int{}
	for _, c := range cands {
		for t := range c.terms {
			df[t]++
		}
	}
	if avgLen <= 0 {
		avgLen = 1
	}
	scores := make([]float64, len(cands))
	for i, c := range cands {
		var s float64
		for _, t := range query {
			tf := float64(c.terms[t])
			if tf == 0 {
				continue
			}
			idf := math.Log(1 + (float64(n-df[t])+0.5)/(float64(df[t])+0.5))
			s += idf * tf * (bm25K1 + 1) / (tf + bm25K1*(1-bm25B+bm25B*float64(c.length)/avgLen))
		}
		scores[i] = s
	}
	return scores
}
