package memory

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Concurrent named conversations never lose a turn: 8 conversations of one
// tenant, each ingesting its history turn by turn as the window evicts it
// (each request resends what came before), all at once. Every turn must be
// stored when Ingest returns nil, and Ingest must not fail with a busy
// database (the store has one writer at a time).
func TestConcurrentIngestStoresEveryTurn(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		s := openAt(t, at)
		const convs, turns = 8, 5
		ctx := context.Background()
		errs := make(chan error, convs*turns)
		var wg sync.WaitGroup
		for c := 0; c < convs; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				key := Key{Tenant: "t", Conversation: fmt.Sprintf("conv-%d", c)}
				var h []Turn
				for i := 0; i < turns; i++ {
					h = append(h, Turn{Pos: i + 3, Role: "user", Text: fmt.Sprintf("conversation %d says thing %d", c, i)})
					linked, _ := Linked(sinkChain, h)
					if _, err := s.Ingest(ctx, key, linked); err != nil {
						errs <- fmt.Errorf("%s turn %d: %w", key, i, err)
					}
				}
			}(c)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for c := 0; c < convs; c++ {
			key := Key{Tenant: "t", Conversation: fmt.Sprintf("conv-%d", c)}
			got, err := s.Turns(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != turns {
				t.Errorf("%s: %d turns stored, want %d", key, len(got), turns)
			}
		}
	})
}

// A failed ingest or search is counted in /metrics; a request that went
// away is not the store's failure.
func TestStoreFailuresAreCounted(t *testing.T) {
	s, err := Open(StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Linked(sinkChain, []Turn{{Pos: 3, Role: "user", Text: "the boiler code is 7781"}})
	key := Key{Tenant: "t", Conversation: "c"}
	if _, err := s.Ingest(context.Background(), key, h); err != nil {
		t.Fatal(err)
	}
	if got := storeFailures(t, s); got != 0 {
		t.Fatalf("%v failures after a good ingest", got)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = s.Ingest(cancelled, Key{Tenant: "t", Conversation: "other"}, h)
	if got := storeFailures(t, s); got != 0 {
		t.Fatalf("%v failures after a cancelled request", got)
	}
	s.Close()
	if _, err := s.Ingest(context.Background(), key, h); err == nil {
		t.Fatal("ingest into a closed store succeeded")
	}
	if _, err := s.Search(context.Background(), Key{Tenant: "t", Conversation: "unloaded"}, Query{Ask: "boiler", Chain: chainOf(h)}); err == nil {
		t.Fatal("search of a closed store succeeded")
	}
	if got := storeFailures(t, s); got != 2 {
		t.Fatalf("%v failures counted, want 2 (the ingest and the search)", got)
	}
}

func storeFailures(t *testing.T, s *Store) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kvwin_memory_store_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no kvwin_memory_store_errors_total in %v", mfs)
	return 0
}
