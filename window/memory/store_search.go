package memory

import "context"

// Search retrieves the turns q needs from key's stored conversation, best
// first, by the same ranking as Index.Search over the turns of q.Chain's
// own branch (statistics included: a branch's scores never depend on
// another branch's or conversation's turns). Without q.Chain it finds
// nothing. Safe for concurrent use; blocks on disk when a branch is not in
// memory.
func (s *Store) Search(ctx context.Context, key Key, q Query) ([]Hit, error) {
	var hits []Hit
	err := s.retry(ctx, func(ctx context.Context) (err error) { hits, err = s.search(ctx, key, q); return err })
	s.count(ctx, err)
	return hits, err
}

func (s *Store) search(ctx context.Context, key Key, q Query) ([]Hit, error) {
	if len(q.Chain) < 2 {
		return nil, nil
	}
	// Only positions the chain covers can be checked against it.
	if limit := len(q.Chain) - 1; q.Before <= 0 || q.Before > limit {
		q.Before = limit
	}
	st, err := s.locked(ctx, key, false)
	if err != nil || st == nil {
		return nil, err
	}
	chain := func(pos int) (uint64, bool) {
		if pos < 0 || pos+1 >= len(q.Chain) {
			return 0, false
		}
		return q.Chain[pos+1], true
	}
	x := st.branch(chain, q.Before)
	if x == nil {
		x, err = s.loadBranch(ctx, st.id, chain, q.Before)
		if err != nil {
			s.unlock(key, st)
			return nil, err
		}
		st.keep(x)
	}
	err = s.touch(ctx, st)
	s.unlock(key, st)
	if err != nil {
		return nil, err
	}
	return x.Search(q), nil
}

// touch records a use of st for the TTL, writing at most once per TTL/16.
// Callers hold st.mu.
func (s *Store) touch(ctx context.Context, st *convState) error {
	if s.cfg.TTL <= 0 {
		return nil
	}
	now := s.cfg.Now()
	if now.Sub(st.used) < s.cfg.TTL/16 {
		return nil
	}
	if s.isClosed() {
		return ErrClosed
	}
	unlock := s.writeLock()
	_, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE conversations SET used = ? WHERE id = ?`), now.UnixNano(), st.id)
	unlock()
	if err != nil {
		return s.classify(err)
	}
	st.used = now
	return nil
}
