package memory

import (
	"context"
	"sort"
	"sync"
)

// convState is the in-memory part of one stored conversation: its fact
// analysis and the lengths BM25 needs. It is derived from the file (loaded
// on first use, extended by Ingest) and can be dropped at any time.
//
// Invariants: pos is sorted and holds every stored position; prefix[i] is
// the summed term count of the turns at pos[:i].
type convState struct {
	mu     sync.Mutex
	id     int64
	facts  *facts
	pos    []int
	lens   map[int]int
	prefix []int
}

func newConvState(id int64) *convState {
	return &convState{id: id, facts: newFacts(), lens: map[int]int{}, prefix: []int{0}}
}

// has reports whether a position is stored. Callers hold st.mu.
func (st *convState) has(pos int) bool { _, ok := st.lens[pos]; return ok }

// add records stored turns. Callers hold st.mu.
func (st *convState) add(turns []Turn) {
	inOrder := true
	var fresh []Turn
	for _, t := range turns {
		if st.has(t.Pos) {
			continue
		}
		if n := len(st.pos); n > 0 && t.Pos < st.pos[n-1] {
			inOrder = false
		}
		st.lens[t.Pos] = len(terms(t.Text))
		st.pos = append(st.pos, t.Pos)
		fresh = append(fresh, t)
		if inOrder {
			st.prefix = append(st.prefix, st.prefix[len(st.prefix)-1]+st.lens[t.Pos])
		}
	}
	if !inOrder {
		sort.Ints(st.pos)
		st.prefix = append(st.prefix[:0], 0)
		for _, p := range st.pos {
			st.prefix = append(st.prefix, st.prefix[len(st.prefix)-1]+st.lens[p])
		}
	}
	st.facts.add(fresh)
}

// stats returns the number and mean term count of turns below before (all
// if before ≤ 0). Callers hold st.mu.
func (st *convState) stats(before int) (int, float64) {
	n := len(st.pos)
	if before > 0 {
		n = sort.SearchInts(st.pos, before)
	}
	if n == 0 {
		return 0, 0
	}
	return n, float64(st.prefix[n]) / float64(n)
}

// state returns key's conversation state, loading it from the file if it is
// not held; nil if the conversation does not exist and create is false.
func (s *Store) state(ctx context.Context, key Key, create bool) (*convState, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	st, ok := s.convs.get(key)
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	id, err := s.convID(ctx, key, create)
	if err != nil || id == 0 {
		return nil, err
	}
	st = newConvState(id)
	turns, err := s.load(ctx, id)
	if err != nil {
		return nil, err
	}
	st.add(turns)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.convs.get(key); ok {
		return held, nil // another caller loaded it first
	}
	s.convs.put(key, st)
	return st, nil
}

func (s *Store) load(ctx context.Context, id int64) ([]Turn, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT pos, role, text, handle, at FROM turns WHERE conv = ? ORDER BY pos`, id)
	if err != nil {
		return nil, classify(s.path, err)
	}
	defer rows.Close()
	var out []Turn
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			return nil, classify(s.path, err)
		}
		out = append(out, t)
	}
	return out, classify(s.path, rows.Err())
}
