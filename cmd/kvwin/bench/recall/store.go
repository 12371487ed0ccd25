package recall

import (
	"context"
	"sync"

	"kvwin/window"
	"kvwin/window/memory"
)

// benchStore is an in-memory window.Store for the bench: one growing index
// per conversation, so a replay of thousands of turns retrieves from the
// turns evicted so far without rebuilding an index per turn. The bench
// replays one history per conversation, so it needs no branches; a
// memory.Store gives the same hits on one history (its tests hold it).
type benchStore struct {
	mu    sync.Mutex
	convs map[memory.Key]*memory.Index
}

var _ window.Store = (*benchStore)(nil)

func newBenchStore() *benchStore { return &benchStore{convs: map[memory.Key]*memory.Index{}} }

func (s *benchStore) index(key memory.Key) *memory.Index {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.convs[key]
	if !ok {
		x = memory.NewIndex()
		s.convs[key] = x
	}
	return x
}

func (s *benchStore) Ingest(_ context.Context, key memory.Key, turns []memory.Turn) (int, error) {
	before := s.index(key).Len()
	s.index(key).Add(turns...)
	return s.index(key).Len() - before, nil
}

func (s *benchStore) Search(_ context.Context, key memory.Key, q memory.Query) ([]memory.Hit, error) {
	return s.index(key).Search(q), nil
}

func (s *benchStore) Delete(_ context.Context, key memory.Key) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.convs[key]
	delete(s.convs, key)
	return ok, nil
}
