package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"kvwin/window/memory/pgtest"
)

// hangGuard is how long a store call may take in these tests before the
// test fails as hung: minutes, a guard, never the property tested (that is
// the order of events: every call returns while the database is still
// paused).
const hangGuard = 3 * time.Minute

// testTimeout is the store timeout of these tests: small, so they run
// fast, and far above a healthy statement's answer on a loaded machine;
// its value is never asserted.
const testTimeout = time.Second

// within runs f, failing t if it has not returned after hangGuard.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s still waiting on the paused database after %v", what, hangGuard)
		return nil
	}
}

// TestSharedDatabaseHung: with every process of the database stopped
// (connections open, nothing answering), every call of the store returns
// while the database is still stopped: the first with ErrTimeout, which
// marks the store down (Health), the calls after it at once with
// ErrUnavailable; counted as failures. Once the database runs again the
// store serves again, without a restart.
func TestSharedDatabaseHung(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	key := Key{Tenant: "t", Conversation: "c"}
	h := history(40, 5, "The boiler code is 7781.")
	calls := []struct {
		name string
		call func(s *Store) error
	}{
		{"Ingest", func(s *Store) error { _, err := s.Ingest(ctx, key, h[:30]); return err }},
		{"Search", func(s *Store) error {
			_, err := s.Search(ctx, key, Query{Ask: "boiler code", Chain: chainOf(h)})
			return err
		}},
		{"Turns", func(s *Store) error { _, err := s.Turns(ctx, key); return err }},
		{"Delete", func(s *Store) error { _, err := s.Delete(ctx, key); return err }},
		{"Expire", func(s *Store) error { _, err := s.Expire(ctx); return err }},
		{"SaveResponse", func(s *Store) error {
			return s.SaveResponse(ctx, StoredResponse{ID: "r9", Key: key, Previous: "r1", Messages: []byte(`"r9"`)})
		}},
		{"Response", func(s *Store) error { _, err := s.Response(ctx, "t", "r1"); return err }},
		{"ResponseChain", func(s *Store) error { _, _, err := s.ResponseChain(ctx, "t", "r1"); return err }},
		{"DeleteResponse", func(s *Store) error { _, err := s.DeleteResponse(ctx, "t", "r1"); return err }},
	}
	// One store per call (replicas of one database), each of which has
	// used the database, so each call finds a store that believes it up.
	back := make(chan struct{}, 8)
	stores := make([]*Store, len(calls))
	for i := range calls {
		var cfg StoreConfig
		cfg.URL, cfg.Timeout, cfg.TTL = srv.DSN, testTimeout, time.Hour
		if i == 0 {
			cfg.reconnected = func() { back <- struct{}{} }
		}
		stores[i] = openAt(t, cfg)
	}
	if _, err := stores[0].Ingest(ctx, key, h[:10]); err != nil {
		t.Fatal(err)
	}
	saveChain(t, stores[0], key, "r", 1, "")
	for i, s := range stores {
		if _, _, err := s.ResponseChain(ctx, "t", "r1"); err != nil {
			t.Fatalf("store %d before the pause: %v", i, err)
		}
	}

	srv.Pause()
	for i, c := range calls {
		s := stores[i]
		t.Run(c.name, func(t *testing.T) {
			if err := within(t, c.name, func() error { return c.call(s) }); !errors.Is(err, ErrTimeout) {
				t.Fatalf("%s with the database paused: %v, want ErrTimeout", c.name, err)
			}
			if err := s.Health(); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Health after the timeout = %v, want ErrUnavailable", err)
			}
			// Down now: the same call fails at once with the recorded fault,
			// never reaching the database (a deadline of its own would be
			// another error).
			if err := within(t, c.name, func() error { return c.call(s) }); err != s.Health() {
				t.Fatalf("%s once down: %v, want the store's fault %v", c.name, err, s.Health())
			}
		})
	}
	if got := storeFailures(t, stores[0]); got != 2 {
		t.Fatalf("%v failures counted by the Ingest's store, want 2 (the timeout, then the refusal)", got)
	}
	if got := stores[0].unstored.Load(); got != 60 {
		t.Fatalf("%d unstored turns counted, want 60", got)
	}
	srv.Resume()
	awaitReconnect(t, stores[0], back)
	if n, err := stores[0].Ingest(ctx, key, h); n != 30 || err != nil {
		t.Fatalf("ingest after the database resumed = %d, %v; want the 30 turns not stored yet", n, err)
	}
}

// TestSharedDatabaseHungConcurrent: calls waiting on the paused database
// at once, more than the pool has connections, all return while it is
// still paused, with ErrTimeout (their own, or the store's fault that
// ended them).
func TestSharedDatabaseHungConcurrent(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	s := openAt(t, StoreConfig{URL: srv.DSN, Timeout: testTimeout})
	h := history(40, 5, "The boiler code is 7781.")
	const n = 16 // twice the pool: some wait for a connection, not on one
	for i := range n {
		if _, err := s.Ingest(ctx, Key{Tenant: "t", Conversation: fmt.Sprint(i)}, h[:10]); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			key := Key{Tenant: "t", Conversation: fmt.Sprint(i)}
			if i%2 == 0 {
				_, err := s.Ingest(ctx, key, h)
				errs <- err
				return
			}
			_, err := s.Search(ctx, key, Query{Ask: "boiler code", Chain: chainOf(h)})
			errs <- err
		}()
	}
	for range n {
		if err := within(t, "a call", func() error { return <-errs }); !errors.Is(err, ErrTimeout) {
			t.Fatalf("a call with the database paused: %v, want ErrTimeout", err)
		}
	}
	srv.Resume()
}

// TestSharedSlowIsNotSilent: the timeout bounds silence, not work: an
// ingest of more turns than the database stores within the timeout
// (thousands of statements, each answered at once) succeeds, and the store
// stays up.
func TestSharedSlowIsNotSilent(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, StoreConfig{URL: pgtest.Schema(t), Timeout: testTimeout})
	h := history(20000, 5, "The boiler code is 7781.")
	if n, err := s.Ingest(ctx, Key{Tenant: "t", Conversation: "long"}, h); n != len(h) || err != nil {
		t.Fatalf("a long ingest = %d, %v; want %d", n, err, len(h))
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after a long ingest: %v", err)
	}
}

// TestSharedDatabaseHungIdle: a store that makes no call (a replica
// serving nothing) still finds its database silent, by its reconnect
// loop's ping, and says so in Health while the database is paused; it says
// it is up again once the database runs.
func TestSharedDatabaseHungIdle(t *testing.T) {
	srv := pgtest.Start(t)
	down, back := make(chan struct{}, 8), make(chan struct{}, 8)
	s := openAt(t, StoreConfig{URL: srv.DSN, Timeout: testTimeout,
		wentDown: func() { down <- struct{}{} }, reconnected: func() { back <- struct{}{} }})
	srv.Pause()
	select {
	case <-down:
	case <-time.After(hangGuard):
		t.Fatalf("Health still %v %v into the pause", s.Health(), hangGuard)
	}
	if err := s.Health(); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Health with the database paused = %v, want ErrTimeout", err)
	}
	srv.Resume()
	awaitReconnect(t, s, back)
}
