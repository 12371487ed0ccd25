package memory

// BM25 parameters: the usual defaults (Robertson and Zaragoza 2009), the same
// as SQLite FTS5's bm25() and the bench's reference policy.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)
