package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// convState is the in-memory part of one stored conversation: an index per
// branch in use. It is derived from the file (loaded on use, extended by
// Ingest) and can be dropped at any time.
//
// Invariants: every branch is one linear history, an Index whose turns are
// all on one chain (each turn's Parent is the chain of the one before it
// where both are held). A branch is built only from turns of its own chain,
// so its statistics and fact analysis never see another branch's text.
// Branches are held most recently used first, at most maxBranches.
type convState struct {
	mu       sync.Mutex
	id       int64
	rev      int64 // the conversation row's rev the branches reflect
	gone     bool  // deleted: callers must look the conversation up again
	used     time.Time
	branches []*Index
	// held is what the branches held when last counted (account): the
	// store's LRU reads it under the store's lock, which may not take mu.
	held atomic.Int64
}

// account counts what st's branches hold now. Callers hold st.mu.
func (st *convState) account() {
	var n int64
	for _, x := range st.branches {
		n += x.Bytes()
	}
	st.held.Store(n)
}

// convBytes is the size the store's LRU gives a conversation's state.
func convBytes(st *convState) int64 { return 256 + st.held.Load() }

// unlock counts what st holds now, lets the LRU evict down to its bound
// (st itself stays while it is the newest) and unlocks st. Callers that
// may have changed st's branches unlock it this way.
func (s *Store) unlock(key Key, st *convState) {
	st.account()
	s.mu.Lock()
	if held, ok := s.convs.Get(key); ok && held == st {
		s.convs.Resize(key)
	}
	s.mu.Unlock()
	st.mu.Unlock()
}

// maxBranches bounds the branch indexes one conversation keeps in memory;
// a branch dropped is rebuilt from the file when asked for again.
const maxBranches = 4

// onChain reports whether x's history agrees with the turns of chain below
// before: x's highest held turn below before is on the chain (a chain at
// one position fixes every position under it). An empty x agrees with
// nothing.
func onChain(x *Index, chain func(pos int) (uint64, bool), before int) bool {
	t, ok := x.highest(before)
	if !ok {
		return false
	}
	c, ok := chain(t.Pos)
	return ok && c == t.Chain()
}

// branch returns the held branch that agrees with chain below before and
// holds nothing at or past before, moving it to the front; nil if none.
// Callers hold st.mu.
func (st *convState) branch(chain func(pos int) (uint64, bool), before int) *Index {
	for i, x := range st.branches {
		if !onChain(x, chain, before) {
			continue
		}
		if before > 0 {
			if t, ok := x.highest(0); ok && t.Pos >= before {
				// The branch runs past the ask: its later turns may be
				// another history's, and must not shape this search.
				if c, ok := chain(t.Pos); !ok || c != t.Chain() {
					continue
				}
			}
		}
		copy(st.branches[1:i+1], st.branches[:i])
		st.branches[0] = x
		return x
	}
	return nil
}

// holds reports whether a held branch has the turn at pos on chain.
// Callers hold st.mu.
func (st *convState) holds(pos int, chain uint64) bool {
	for _, x := range st.branches {
		if t, ok := x.at(pos); ok && t.Chain() == chain {
			return true
		}
	}
	return false
}

// keep puts x first among the branches. Callers hold st.mu.
func (st *convState) keep(x *Index) {
	st.branches = append([]*Index{x}, st.branches...)
	if len(st.branches) > maxBranches {
		st.branches = st.branches[:maxBranches]
	}
}

// state returns key's conversation state, nil if the conversation does not
// exist and create is false. It reads no turns: branches load on use.
func (s *Store) state(ctx context.Context, key Key, create bool) (*convState, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	st, ok := s.convs.Get(key)
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	id, rev, err := s.convID(ctx, key, create)
	if err != nil || id == 0 {
		return nil, err
	}
	st = &convState{id: id, rev: rev}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.convs.Get(key); ok {
		return held, nil // another caller loaded it first
	}
	s.convs.Put(key, st)
	return st, nil
}

// forget drops key's in-memory state.
func (s *Store) forget(key Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.convs.Remove(key)
}

// locked returns key's state locked, looking it up again if a Delete or an
// expiry removed it meanwhile; nil (unlocked) if it does not exist and
// create is false. The caller unlocks st.mu.
//
// On a shared database it checks st against the conversation's row first:
// a conversation another process deleted (no row, or a row of another id)
// is dropped and looked up anew; one another process wrote to (another
// rev) has its held branches extended from the database.
func (s *Store) locked(ctx context.Context, key Key, create bool) (*convState, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	for {
		st, err := s.state(ctx, key, create)
		if err != nil || st == nil {
			return nil, err
		}
		st.mu.Lock()
		if !st.gone && s.d.shared {
			err = s.check(ctx, st, key)
		}
		if err != nil {
			st.mu.Unlock()
			return nil, err
		}
		if !st.gone {
			return st, nil
		}
		st.mu.Unlock()
		s.forget(key)
	}
}

// check compares st with key's row and brings st up to date: gone if the
// row is gone or another's, its branches extended if its rev moved.
// Callers hold st.mu.
func (s *Store) check(ctx context.Context, st *convState, key Key) error {
	id, rev, err := s.convID(ctx, key, false)
	if err != nil {
		return err
	}
	if id != st.id {
		st.gone, st.branches = true, nil
		return nil
	}
	if rev == st.rev {
		return nil
	}
	if err := s.refresh(ctx, st); err != nil {
		return err
	}
	st.rev = rev
	return nil
}

// refresh extends each held branch with the turns other processes stored
// after its highest one: from its tip, the turn one position up whose
// Parent is the tip's chain, and so on. Turns are named by their chains,
// so what is found is exactly what this history would have stored.
// Callers hold st.mu.
func (s *Store) refresh(ctx context.Context, st *convState) error {
	if len(st.branches) == 0 {
		return nil
	}
	from := int(^uint(0) >> 1)
	tips := make([]Turn, len(st.branches))
	for i, x := range st.branches {
		t, ok := x.highest(0)
		if !ok {
			st.branches = nil // an empty branch agrees with nothing; reload on use
			return nil
		}
		tips[i], from = t, min(from, t.Pos)
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT pos, role, text, handle, at, parent, chain FROM turns WHERE conv = ? AND pos > ? ORDER BY pos, id`), st.id, from)
	if err != nil {
		return s.classify(err)
	}
	defer rows.Close()
	next := map[[2]uint64][]Turn{} // (pos, parent) → the turns there: more than one where histories fork
	for rows.Next() {
		t, _, err := scanChained(rows)
		if err != nil {
			return s.classify(err)
		}
		k := [2]uint64{uint64(t.Pos), t.Parent}
		next[k] = append(next[k], t)
	}
	if err := rows.Err(); err != nil {
		return s.classify(err)
	}
	for i, x := range st.branches {
		var more []Turn
		for tip := tips[i]; ; {
			ts := next[[2]uint64{uint64(tip.Pos + 1), tip.Chain()}]
			if len(ts) != 1 {
				break // the end, or a fork: which way this history goes, its next ingest or load says
			}
			t := ts[0]
			more = append(more, t)
			tip = t
		}
		x.Add(more...)
	}
	return nil
}

// loadBranch builds the branch of chain below before from the file: every
// stored turn on the asking history's chain. Where chain does not say (below
// an ingested batch), a turn's stored Parent names the one before it.
func (s *Store) loadBranch(ctx context.Context, id int64, chain func(pos int) (uint64, bool), before int) (*Index, error) {
	if before <= 0 {
		before = int(^uint(0) >> 1)
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT pos, role, text, handle, at, parent, chain FROM turns WHERE conv = ? AND pos < ? ORDER BY pos DESC`), id, before)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var turns []Turn
	parent := map[int]uint64{} // chain wanted at a position, from a turn above it
	for rows.Next() {
		t, c, err := scanChained(rows)
		if err != nil {
			return nil, s.classify(err)
		}
		want, ok := chain(t.Pos)
		if !ok {
			want, ok = parent[t.Pos]
		}
		if ok && want == c {
			turns = append(turns, t)
			parent[t.Pos-1] = t.Parent
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.classify(err)
	}
	return NewIndex(turns...), nil
}
