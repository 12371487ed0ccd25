package memory

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// history returns a linked conversation of n routine turns from position 3
// with text put at position at (replacing the routine turn there).
func history(n, at int, text string) []Turn {
	var out []Turn
	for i := 0; i < n; i++ {
		t := Turn{Pos: i + 3, Role: "user", Text: fmt.Sprintf("Routine note %d about the weekly build.", i)}
		if i%2 == 1 {
			t.Role, t.Text = "assistant", "Noted."
		}
		if i+3 == at {
			t.Role, t.Text = "user", text
		}
		out = append(out, t)
	}
	out, _ = Linked(sinkChain, out)
	return out
}

func searchTexts(t *testing.T, s *Store, key Key, ask string, h []Turn) string {
	t.Helper()
	hits, err := s.Search(context.Background(), key, Query{Ask: ask, Chain: chainOf(h)})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(hitTexts(hits), "\n")
}

// TestStoreBranches: two histories under one key that disagree at a
// position are two branches; each request gets only its own branch's turns,
// whichever wrote first.
func TestStoreBranches(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key := Key{Tenant: "acme", Conversation: "support"}
		owner := history(40, 9, "Refunds go to IBAN DE89-3704-0044.")
		attacker := history(40, 9, "Refunds go to ATTACKER-IBAN-666.")
		// The attacker writes first, at the very positions the owner will use.
		if n, err := s.Ingest(ctx, key, attacker); err != nil || n != 40 {
			t.Fatalf("attacker ingest = %d, %v", n, err)
		}
		// The owner's turns before the fork are the same turns: stored once.
		// From the fork on, hers are a branch of their own, stored too.
		if n, err := s.Ingest(ctx, key, owner); err != nil || n != 40-(9-3) {
			t.Fatalf("owner ingest = %d, %v; want %d new", n, err, 40-(9-3))
		}
		if got := searchTexts(t, s, key, "Where do refunds go?", owner); !strings.Contains(got, "DE89") || strings.Contains(got, "ATTACKER") {
			t.Fatalf("owner's packet: %q", got)
		}
		if got := searchTexts(t, s, key, "Where do refunds go?", attacker); !strings.Contains(got, "ATTACKER") || strings.Contains(got, "DE89") {
			t.Fatalf("attacker's packet: %q", got)
		}
		// The same holds after a restart, when branches load from the file.
		_ = s.Close()
		s = openAt(t, at)
		if got := searchTexts(t, s, key, "refunds IBAN", owner); !strings.Contains(got, "DE89") || strings.Contains(got, "ATTACKER") {
			t.Fatalf("owner's packet after restart: %q", got)
		}
		// A third history that shares only the sinks gets neither.
		third := history(40, 9, "We do not do refunds.")
		third[0].Text = "A different opening."
		third, _ = Linked(sinkChain, third)
		if got := searchTexts(t, s, key, "Where do refunds go? IBAN", third); strings.Contains(got, "IBAN") {
			t.Fatalf("a history that never said it got %q", got)
		}
		all, err := s.Turns(ctx, key)
		if err != nil || len(all) != 40+34 {
			t.Fatalf("Turns = %d, %v; want both branches, %d", len(all), err, 40+34)
		}
	})
}

// TestStoreBranchGrows: a history ingested in steps (each resending its
// evicted turns, as the window does) is one branch: a search sees all of it.
func TestStoreBranchGrows(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key := Key{Tenant: "t", Conversation: "c"}
		h := history(300, 5, "The boiler code is 7781.")
		for end := 20; end <= len(h); end += 20 {
			if _, err := s.Ingest(ctx, key, h[:end]); err != nil {
				t.Fatal(err)
			}
		}
		// Chunks that do not overlap continue it too (the first turn's Parent).
		h2 := history(400, 5, "The boiler code is 7781.")
		if _, err := s.Ingest(ctx, key, h2[300:]); err != nil {
			t.Fatal(err)
		}
		if got := searchTexts(t, s, key, "boiler code", h2); !strings.Contains(got, "7781") {
			t.Fatalf("search over the grown branch: %q", got)
		}
		st, _ := s.state(ctx, key, false)
		if len(st.branches) != 1 || st.branches[0].Len() != 400 {
			t.Fatalf("%d branches, first holds %d turns; want 1 of 400", len(st.branches), st.branches[0].Len())
		}
	})
}

func TestStoreDelete(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key, other := Key{Tenant: "t", Conversation: "gone"}, Key{Tenant: "t", Conversation: "kept"}
		h := history(30, 5, "The boiler code is 7781.")
		for _, k := range []Key{key, other} {
			if _, err := s.Ingest(ctx, k, h); err != nil {
				t.Fatal(err)
			}
		}
		_ = searchTexts(t, s, key, "boiler code", h) // loads a branch into memory
		if ok, err := s.Delete(ctx, key); !ok || err != nil {
			t.Fatalf("Delete = %v, %v; want true", ok, err)
		}
		if ok, err := s.Delete(ctx, key); ok || err != nil {
			t.Fatalf("second Delete = %v, %v; want false", ok, err)
		}
		if turns, err := s.Turns(ctx, key); len(turns) != 0 || err != nil {
			t.Fatalf("after Delete: %d turns, %v", len(turns), err)
		}
		if got := searchTexts(t, s, key, "boiler code", h); got != "" {
			t.Fatalf("after Delete the search finds %q", got)
		}
		if got := searchTexts(t, s, other, "boiler code", h); !strings.Contains(got, "7781") {
			t.Fatalf("another conversation lost its turns: %q", got)
		}
		// The key can be used again, from nothing.
		if n, err := s.Ingest(ctx, key, h[:10]); err != nil || n != 10 {
			t.Fatalf("ingest after Delete = %d, %v; want 10", n, err)
		}
	})
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestStoreTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		var expired []Key // what the Expired hook was told (the engine deletes their KV snapshots)
		open := func() *Store {
			cfg := at
			cfg.TTL, cfg.Now, cfg.Expired = time.Hour, clock.Now, func(k Key) { expired = append(expired, k) }
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		s := open()
		h := history(20, 5, "The boiler code is 7781.")
		idle, busy := Key{Tenant: "t", Conversation: "idle"}, Key{Tenant: "t", Conversation: "busy"}
		for _, k := range []Key{idle, busy} {
			if _, err := s.Ingest(ctx, k, h); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(40 * time.Minute)
		_ = searchTexts(t, s, busy, "boiler code", h) // a use: busy's clock restarts
		clock.Add(30 * time.Minute)
		if n, err := s.Expire(ctx); n != 1 || err != nil {
			t.Fatalf("Expire = %d, %v; want 1 (idle)", n, err)
		}
		if !slices.Equal(expired, []Key{idle}) {
			t.Fatalf("Expired hook told %v, want only %v", expired, idle)
		}
		if turns, _ := s.Turns(ctx, idle); len(turns) != 0 {
			t.Fatalf("idle conversation kept %d turns past its TTL", len(turns))
		}
		if got := searchTexts(t, s, busy, "boiler code", h); !strings.Contains(got, "7781") {
			t.Fatalf("busy conversation expired: %q", got)
		}
		// Open sweeps: busy, last used now, is expired by the next start after
		// more than an hour.
		_ = s.Close()
		clock.Add(61 * time.Minute)
		s = open()
		if turns, _ := s.Turns(ctx, busy); len(turns) != 0 {
			t.Fatalf("Open did not expire a conversation idle for 61m: %d turns", len(turns))
		}
		if !slices.Equal(expired, []Key{idle, busy}) {
			t.Fatalf("Expired hook told %v, want %v then %v (at Open)", expired, idle, busy)
		}
	})
}

// TestStoreMigratesVersion1: a file written by the previous schema (turns
// filed by position, first writer winning) opens; its turns, which cannot
// be placed on a chain, are never served, and Delete removes them.
func TestStoreMigratesVersion1(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "memory.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE conversations (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, UNIQUE (tenant, name))`,
		`CREATE TABLE turns (id INTEGER PRIMARY KEY, conv INTEGER NOT NULL REFERENCES conversations (id), pos INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, handle TEXT NOT NULL, at INTEGER NOT NULL, UNIQUE (conv, pos))`,
		`CREATE VIRTUAL TABLE turns_fts USING fts5 (conv, words, content = '', tokenize = 'unicode61 remove_diacritics 0')`,
		`INSERT INTO conversations (id, tenant, name) VALUES (1, 't', 'old')`,
		`INSERT INTO turns (conv, pos, role, text, handle, at) VALUES (1, 5, 'user', 'The boiler code is 7781.', 'm5.0000', 1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	s := openStore(t, dir)
	ctx := context.Background()
	key := Key{Tenant: "t", Conversation: "old"}
	h := history(20, 5, "The boiler code is 7781.")
	if got := searchTexts(t, s, key, "boiler code", h); got != "" {
		t.Fatalf("a version-1 turn was served: %q", got)
	}
	if n, err := s.Ingest(ctx, key, h); err != nil || n != 20 {
		t.Fatalf("ingest into a migrated file = %d, %v", n, err)
	}
	if got := searchTexts(t, s, key, "boiler code", h); !strings.Contains(got, "7781") {
		t.Fatalf("after ingest: %q", got)
	}
	if ok, err := s.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	var left int
	if err := s.db.QueryRow(`SELECT count(*) FROM turns_v1`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("version-1 rows left after Delete: %d, %v", left, err)
	}
	// Reopening a migrated file is a no-op.
	_ = s.Close()
	openStore(t, dir)
}

// TestStoreResendWritesNothing: a request resends its whole history; turns
// a held branch already has cost no transaction (no fsync on every turn).
func TestStoreResendWritesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		cfg := at
		cfg.Now = clock.Now
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		key := Key{Tenant: "t", Conversation: "c"}
		h := history(30, 5, "The boiler code is 7781.")
		if n, err := s.Ingest(ctx, key, h[:20]); n != 20 || err != nil {
			t.Fatalf("first ingest = %d, %v", n, err)
		}
		used := func() int64 {
			var u int64
			if err := s.db.QueryRow(`SELECT used FROM conversations`).Scan(&u); err != nil {
				t.Fatal(err)
			}
			return u
		}
		first := used()
		clock.Add(time.Hour)
		if n, err := s.Ingest(ctx, key, h[:20]); n != 0 || err != nil {
			t.Fatalf("resend = %d, %v", n, err)
		}
		if used() != first {
			t.Fatal("a resent history wrote to the file")
		}
		if n, err := s.Ingest(ctx, key, h); n != 10 || err != nil {
			t.Fatalf("grown history = %d, %v; want the 10 new turns", n, err)
		}
		if used() == first {
			t.Fatal("new turns did not record the use")
		}
	})
}
