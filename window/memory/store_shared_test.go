package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/window/memory/pgtest"
)

// Several gateway replicas share one PostgreSQL store: these tests open two
// (or more) Stores on one schema, each with its own in-memory state, as two
// processes would.

func twoStores(t *testing.T) (a, b *Store, dsn string) {
	t.Helper()
	dsn = pgtest.Schema(t)
	return openAt(t, StoreConfig{URL: dsn}), openAt(t, StoreConfig{URL: dsn}), dsn
}

func countRows(t *testing.T, dsn, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pgtest.Open(t, dsn).QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestSharedAlternatingReplicas: a conversation whose requests go to two
// replicas in turn, each request resending its evicted turns as the window
// does, is one history in the database, every turn once; a fact stored
// through one replica is found through the other, whose branch was loaded
// before that fact was said.
func TestSharedAlternatingReplicas(t *testing.T) {
	ctx := context.Background()
	a, b, dsn := twoStores(t)
	key := Key{Tenant: "acme", Conversation: "shared"}
	h := history(120, 61, "The boiler code is 7781.")
	stores := []*Store{a, b}
	for i, end := 0, 10; end <= len(h); i, end = i+1, end+10 {
		if _, err := stores[i%2].Ingest(ctx, key, h[:end]); err != nil {
			t.Fatal(err)
		}
		if end == 50 {
			// b holds the branch up to 50; a stores the fact at 61 later.
			_ = searchTexts(t, b, key, "boiler code", h[:50])
		}
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM turns`); got != len(h) {
		t.Fatalf("%d rows, want %d (every turn once)", got, len(h))
	}
	// The last ingest (120 turns) went through b; a's branch stops at 110.
	// Search through each with the whole history, without ingesting.
	for name, s := range map[string]*Store{"a": a, "b": b} {
		if got := searchTexts(t, s, key, "What is the boiler code?", h); !strings.Contains(got, "7781") {
			t.Fatalf("through %s: %q", name, got)
		}
	}
	// a's branch was extended from the database, not rebuilt: one branch
	// holding all 120.
	st, _ := a.state(ctx, key, false)
	if len(st.branches) != 1 || st.branches[0].Len() != len(h) {
		t.Fatalf("a holds %d branches, first of %d turns; want 1 of %d", len(st.branches), st.branches[0].Len(), len(h))
	}
}

// TestSharedSimultaneousReplicas: two replicas ingest growing histories of
// the same conversations at the same time, several requests in flight on
// each: no error, no duplicate, no lost turn.
func TestSharedSimultaneousReplicas(t *testing.T) {
	ctx := context.Background()
	a, b, dsn := twoStores(t)
	const convs, turns = 3, 60
	var wg sync.WaitGroup
	errs := make(chan error, 4*convs*turns)
	for c := 0; c < convs; c++ {
		key := Key{Tenant: "t", Conversation: fmt.Sprintf("c%d", c)}
		h := history(turns, 9, fmt.Sprintf("Conversation %d's code is %d.", c, 1000+c))
		for w, s := range []*Store{a, b, a, b} {
			wg.Add(1)
			go func(w int, s *Store) {
				defer wg.Done()
				for end := 1 + w; end <= turns; end += 3 {
					if _, err := s.Ingest(ctx, key, h[:end]); err != nil {
						errs <- err
					}
				}
			}(w, s)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM turns`); got != convs*turns {
		t.Fatalf("%d rows, want %d", got, convs*turns)
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM (SELECT conv, pos FROM turns GROUP BY conv, pos HAVING count(*) > 1) d`); got != 0 {
		t.Fatalf("%d positions stored twice", got)
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM conversations`); got != convs {
		t.Fatalf("%d conversations, want %d", got, convs)
	}
}

// TestSharedDelete: a DELETE through one replica is seen by the other: its
// own DELETE finds nothing, its search nothing, and a resend through it
// starts the conversation afresh, every turn written again.
func TestSharedDelete(t *testing.T) {
	ctx := context.Background()
	a, b, dsn := twoStores(t)
	key := Key{Tenant: "t", Conversation: "gone"}
	h := history(30, 5, "The boiler code is 7781.")
	if _, err := a.Ingest(ctx, key, h); err != nil {
		t.Fatal(err)
	}
	if got := searchTexts(t, b, key, "boiler code", h); !strings.Contains(got, "7781") {
		t.Fatalf("b before the delete: %q", got) // b now holds the branch
	}
	if ok, err := a.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete through a = %v, %v", ok, err)
	}
	if ok, err := b.Delete(ctx, key); ok || err != nil {
		t.Fatalf("Delete through b = %v, %v; want false (already gone)", ok, err)
	}
	if got := searchTexts(t, b, key, "boiler code", h); got != "" {
		t.Fatalf("b still serves deleted turns: %q", got)
	}
	if n, err := b.Ingest(ctx, key, h[:12]); n != 12 || err != nil {
		t.Fatalf("resend through b = %d, %v; want 12 new", n, err)
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM turns`); got != 12 {
		t.Fatalf("%d rows after the resend, want 12", got)
	}
	if n, err := a.Ingest(ctx, key, h[:20]); n != 8 || err != nil {
		t.Fatalf("a after b's resend = %d, %v; want 8 new", n, err)
	}
}

// TestSharedTTL: a conversation one replica expires is gone for the other.
func TestSharedTTL(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Schema(t)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := StoreConfig{URL: dsn, TTL: time.Hour, Now: clock.Now}
	a, b := openAt(t, cfg), openAt(t, cfg)
	key := Key{Tenant: "t", Conversation: "idle"}
	h := history(20, 5, "The boiler code is 7781.")
	if _, err := a.Ingest(ctx, key, h); err != nil {
		t.Fatal(err)
	}
	_ = searchTexts(t, b, key, "boiler code", h)
	clock.Add(2 * time.Hour)
	if n, err := a.Expire(ctx); n != 1 || err != nil {
		t.Fatalf("Expire = %d, %v", n, err)
	}
	if n, err := b.Expire(ctx); n != 0 || err != nil {
		t.Fatalf("second Expire = %d, %v; want 0", n, err)
	}
	if got := searchTexts(t, b, key, "boiler code", h); got != "" {
		t.Fatalf("b serves expired turns: %q", got)
	}
	if n, err := b.Ingest(ctx, key, h); n != len(h) || err != nil {
		t.Fatalf("resend = %d, %v; want %d", n, err, len(h))
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM turns`); got != len(h) {
		t.Fatalf("%d rows, want %d", got, len(h))
	}
}

// TestSharedMigrationRace: replicas starting at once on an empty database
// migrate it once; every one opens.
func TestSharedMigrationRace(t *testing.T) {
	dsn := pgtest.Schema(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := Open(StoreConfig{URL: dsn})
			if err == nil {
				err = s.Health()
				_ = s.Close()
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
	}
	if got := countRows(t, dsn, `SELECT version FROM kvwin_schema WHERE component = 'memory'`); got != len(postgresDialect.steps) {
		t.Fatalf("schema version %d, want %d", got, len(postgresDialect.steps))
	}
}

// TestSharedDatabaseDown: while the database is away the store fails at
// once with ErrUnavailable (counted, nothing written), Health says so, and
// it serves again once the database is back, without a restart.
func TestSharedDatabaseDown(t *testing.T) {
	ctx := context.Background()
	dsn, proxied, p := pgtest.ProxiedSchema(t)
	back := make(chan struct{}, 8)
	s := openAt(t, StoreConfig{URL: proxied, reconnected: func() { back <- struct{}{} }})
	key := Key{Tenant: "t", Conversation: "c"}
	h := history(40, 5, "The boiler code is 7781.")
	if _, err := s.Ingest(ctx, key, h[:10]); err != nil {
		t.Fatal(err)
	}
	// A blip: every pooled connection cut, the database reachable again at
	// once. The next call retries on a fresh connection: nothing degrades.
	p.Down()
	p.Up()
	if n, err := s.Ingest(ctx, key, h[:20]); n != 10 || err != nil {
		t.Fatalf("ingest after a blip = %d, %v; want 10 new", n, err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after a blip: %v", err)
	}
	p.Down()
	if _, err := s.Ingest(ctx, key, h[:30]); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ingest with the database down: %v, want ErrUnavailable", err)
	}
	if err := s.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Health = %v, want ErrUnavailable", err)
	}
	if _, err := s.Delete(ctx, key); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Delete with the database down: %v", err)
	}
	if _, err := s.Search(ctx, key, Query{Ask: "boiler code", Chain: chainOf(h)}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Search with the database down: %v", err)
	}
	if got := storeFailures(t, s); got != 2 {
		t.Fatalf("%v failures counted, want 2 (the ingest and the search)", got)
	}
	if got := s.unstored.Load(); got != 30 {
		t.Fatalf("%d unstored turns counted, want 30", got)
	}
	p.Up()
	awaitReconnect(t, s, back)
	if n, err := s.Ingest(ctx, key, h); n != 20 || err != nil {
		t.Fatalf("ingest after the database came back = %d, %v; want the 20 turns not stored yet", n, err)
	}
	if got := countRows(t, dsn, `SELECT count(*) FROM turns`); got != len(h) {
		t.Fatalf("%d rows, want %d", got, len(h))
	}
}

// TestSharedOpenWhileDown: a replica that starts while the database is
// away serves degraded and migrates once it is reachable.
func TestSharedOpenWhileDown(t *testing.T) {
	_, proxied, p := pgtest.ProxiedSchema(t)
	p.Down()
	back := make(chan struct{}, 8)
	s, err := Open(StoreConfig{URL: proxied, reconnected: func() { back <- struct{}{} }})
	if err != nil {
		t.Fatalf("Open with the database down: %v; want a degraded store", err)
	}
	defer s.Close()
	if err := s.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Health = %v", err)
	}
	if _, err := s.Ingest(context.Background(), Key{Tenant: "t", Conversation: "c"}, history(4, 0, "")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ingest = %v", err)
	}
	p.Up()
	awaitReconnect(t, s, back)
	if n, err := s.Ingest(context.Background(), Key{Tenant: "t", Conversation: "c"}, history(4, 0, "")); n != 4 || err != nil {
		t.Fatalf("Ingest after the database came = %d, %v", n, err)
	}
}

// awaitReconnect waits for s's reconnect loop to report the database back.
func awaitReconnect(t *testing.T, s *Store, back <-chan struct{}) {
	t.Helper()
	select {
	case <-back:
	case <-time.After(3 * time.Minute):
		t.Fatalf("still degraded 30s after the database came back: %v", s.Health())
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after the reconnect: %v", err)
	}
}

// TestSharedDeleteSeenWithoutARoundTrip: a replica holding a branch checks
// it against the conversation's row in the one statement a search reads
// (no TTL: no use stamp either), so a conversation deleted through another
// replica is gone at its next search, and a held branch costs one round
// trip per search before the delete and after the conversation is stored
// anew.
func TestSharedDeleteSeenWithoutARoundTrip(t *testing.T) {
	ctx := context.Background()
	dsn, proxied, p := pgtest.ProxiedSchema(t)
	a, b := openAt(t, StoreConfig{URL: proxied}), openAt(t, StoreConfig{URL: dsn})
	key := Key{Tenant: "t", Conversation: "gone"}
	h := history(30, 5, "The boiler code is 7781.")
	if _, err := b.Ingest(ctx, key, h); err != nil {
		t.Fatal(err)
	}
	search := func() string { return searchTexts(t, a, key, "boiler code", h) }
	if got := search(); !strings.Contains(got, "7781") {
		t.Fatalf("a before the delete: %q", got)
	}
	if n := minRoundTrips(p, func() { search() }); n != 1 {
		t.Fatalf("a held branch's search costs %d round trips, want 1", n)
	}
	if ok, err := b.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete through b = %v, %v", ok, err)
	}
	if got := search(); got != "" {
		t.Fatalf("a serves turns b deleted: %q", got)
	}
	if _, err := b.Ingest(ctx, key, h[:2]); err != nil { // the turns before the fact (position 5)
		t.Fatal(err)
	}
	if got := search(); strings.Contains(got, "7781") {
		t.Fatalf("a serves a deleted turn after the conversation was stored anew: %q", got)
	}
	if n := minRoundTrips(p, func() { search() }); n != 1 {
		t.Fatalf("after the delete a held branch's search costs %d round trips, want 1", n)
	}
}
