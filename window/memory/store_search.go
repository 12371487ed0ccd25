package memory

import (
	"context"
	"strings"
)

// Search retrieves the turns q needs from key's stored conversation, best
// first, by the same ranking as Index.Search: FTS5 finds the candidate turns
// holding any term of the ask, BM25 scores them with the conversation's own
// statistics (FTS5's bm25() would take them from every conversation in the
// file, leaking term statistics across tenants and making a packet depend on
// other conversations' traffic). Safe for concurrent use; blocks on disk.
func (s *Store) Search(ctx context.Context, key Key, q Query) ([]Hit, error) {
	st, err := s.state(ctx, key, false)
	if err != nil || st == nil {
		return nil, err
	}
	qterms := queryTerms(q.Ask)
	lexical, err := s.match(ctx, st.id, qterms, q.Before)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	n, avg := st.stats(q.Before)
	hits, _ := rank(st.facts, q, lexical, n, avg)
	return hits, nil
}

// match returns the conversation's turns below before that hold any term.
func (s *Store) match(ctx context.Context, conv int64, qterms []string, before int) ([]matched, error) {
	if len(qterms) == 0 {
		return nil, nil
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	quoted := make([]string, len(qterms))
	want := map[string]bool{}
	for i, t := range qterms {
		quoted[i] = `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
		want[t] = true
	}
	expr := "conv : " + convToken(conv) + " AND words : (" + strings.Join(quoted, " OR ") + ")"
	if before <= 0 {
		before = int(^uint(0) >> 1)
	}
	// CROSS JOIN makes the FTS match the outer loop: SQLite would otherwise
	// walk the conversation's turns and test each against the match.
	rows, err := s.db.QueryContext(ctx, `
		SELECT t.pos, t.role, t.text, t.handle, t.at
		FROM turns_fts CROSS JOIN turns t ON t.id = turns_fts.rowid
		WHERE turns_fts MATCH ? AND t.conv = ? AND t.pos < ?
		ORDER BY t.pos`, expr, conv, before)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []matched
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			return nil, classify(s.path, err)
		}
		out = append(out, newMatched(t, want))
	}
	return out, classify(s.path, rows.Err())
}
