package memory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(StoreConfig{Dir: dir})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreIngestIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key := Key{Tenant: "t1", Conversation: "c1"}
		turns := team(20)
		steps := []struct {
			name  string
			turns []Turn
			want  int
		}{
			{"first half", turns[:30], 30},
			{"whole history resent", turns, len(turns) - 30},
			{"again", turns, 0},
		}
		for _, st := range steps {
			n, err := s.Ingest(ctx, key, st.turns)
			if err != nil || n != st.want {
				t.Fatalf("%s: Ingest = %d, %v; want %d new", st.name, n, err, st.want)
			}
		}
		_ = s.Close()
		s = openAt(t, at) // a restart: nothing held in memory
		if n, err := s.Ingest(ctx, key, turns); err != nil || n != 0 {
			t.Fatalf("after restart: Ingest = %d, %v; want 0 new", n, err)
		}
		got, err := s.Turns(ctx, key)
		if err != nil || len(got) != len(turns) {
			t.Fatalf("Turns = %d, %v; want %d", len(got), err, len(turns))
		}
		for i, g := range got {
			w := turns[i]
			if g.Pos != w.Pos || g.Role != w.Role || g.Text != w.Text || g.Handle != MakeHandle(w.Pos, w.Role, w.Text) || g.Time.IsZero() {
				t.Fatalf("turn %d = %+v, want %+v with handle and time", i, g, w)
			}
		}
	})
}

// TestStoreMatchesIndex: the store and the in-memory index are one
// retrieval; only where the candidates live differs.
func TestStoreMatchesIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key := Key{Tenant: "t", Conversation: "c"}
		turns := team(60)
		if _, err := s.Ingest(ctx, key, turns); err != nil {
			t.Fatal(err)
		}
		// Another conversation in the same file must not change the scores.
		if _, err := s.Ingest(ctx, Key{Tenant: "t", Conversation: "other"}, team(300)); err != nil {
			t.Fatal(err)
		}
		x := NewIndex(turns...)
		for _, ask := range []string{"Where is Omar based now?", "Which pet does Mei keep?", "ticket 17 to Ravi", "forward the ticket to Lena", "nothing here matches"} {
			for _, before := range []int{0, 40} {
				q := Query{Ask: ask, Before: before, K: 8, Chain: chainOf(turns)}
				want := x.Search(q)
				got, err := s.Search(ctx, key, q)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(hitTexts(got)) != fmt.Sprint(hitTexts(want)) {
					t.Errorf("%q before %d: store %q, index %q", ask, before, hitTexts(got), hitTexts(want))
				}
				for i := range got {
					if got[i].Score != want[i].Score {
						t.Errorf("%q: score %v vs %v", ask, got[i].Score, want[i].Score)
					}
				}
			}
		}
	})
}

func hitTexts(hits []Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Text)
	}
	return out
}

// TestStoreIsolation: a conversation's search never returns another's
// turns, whether the other differs by tenant or by name.
func TestStoreIsolation(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		keys := []Key{{Tenant: "acme", Conversation: "c1"}, {Tenant: "acme", Conversation: "c2"}, {Tenant: "other", Conversation: "c1"}}
		histories := make([][]Turn, len(keys))
		for i, k := range keys {
			secret := fmt.Sprintf("The vault code of Omar is %d%d%d.", i, i, i)
			tm := team(10)
			last := tm[len(tm)-1]
			histories[i] = append(tm, Turn{Pos: last.Pos + 1, Role: "user", Text: secret, Parent: last.Chain()})
			if _, err := s.Ingest(ctx, k, histories[i]); err != nil {
				t.Fatal(err)
			}
		}
		for i, k := range keys {
			// Each asks with the chain of the first history: only keys[0]
			// holds those turns; the others hold their own.
			hits, err := s.Search(ctx, k, Query{Ask: "What is the vault code of Omar?", Chain: chainOf(histories[i])})
			if err != nil {
				t.Fatal(err)
			}
			own := fmt.Sprintf("%d%d%d", i, i, i)
			found := false
			for _, h := range hits {
				for j := range keys {
					other := fmt.Sprintf("%d%d%d", j, j, j)
					if j != i && strings.Contains(h.Text, other) {
						t.Fatalf("%v retrieved %v's turn %q", k, keys[j], h.Text)
					}
				}
				found = found || strings.Contains(h.Text, own)
			}
			if !found {
				t.Fatalf("%v did not retrieve its own secret", k)
			}
		}
		if hits, err := s.Search(ctx, Key{Tenant: "nobody", Conversation: "c1"}, Query{Ask: "vault code", Chain: chainOf(histories[0])}); err != nil || len(hits) != 0 {
			t.Fatalf("unknown conversation: %v, %v", hits, err)
		}
	})
}

func TestStoreFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) (*Store, error)
		want  error
	}{
		{"locked by another owner", func(t *testing.T, dir string) (*Store, error) {
			openStore(t, dir)
			return Open(StoreConfig{Dir: dir})
		}, ErrLocked},
		{"file marked read-only", func(t *testing.T, dir string) (*Store, error) {
			s := openStore(t, dir)
			_ = s.Close()
			if err := os.Chmod(filepath.Join(dir, "memory.db"), 0o444); err != nil {
				t.Fatal(err)
			}
			return Open(StoreConfig{Dir: dir})
		}, ErrReadOnly},
		{"writes refused by sqlite", func(t *testing.T, dir string) (*Store, error) {
			s := openStore(t, dir)
			_ = s.Close()
			s, err := Open(StoreConfig{Dir: dir, readOnly: true})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = s.Close() })
			_, err = s.Ingest(context.Background(), Key{Tenant: "t", Conversation: "c"}, team(1))
			return s, err
		}, ErrReadOnly},
		{"not a database", func(t *testing.T, dir string) (*Store, error) {
			if err := os.WriteFile(filepath.Join(dir, "memory.db"), []byte(strings.Repeat("garbage ", 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
			return Open(StoreConfig{Dir: dir})
		}, ErrCorrupt},
		{"damaged pages", func(t *testing.T, dir string) (*Store, error) {
			s := openStore(t, dir)
			if _, err := s.Ingest(context.Background(), Key{Tenant: "t", Conversation: "c"}, team(400)); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			path := filepath.Join(dir, "memory.db")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := 4096; i < len(data); i += 4096 {
				copy(data[i+8:i+200], strings.Repeat("\xff", 192)) // trash each page's header and cells
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err = Open(StoreConfig{Dir: dir})
			if err == nil {
				t.Cleanup(func() { _ = s.Close() })
				_, err = s.Turns(context.Background(), Key{Tenant: "t", Conversation: "c"})
			}
			return s, err
		}, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := tc.setup(t, dir)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name the store's path", err)
			}
		})
	}
}

// IngestAfter stores a tail only where the store still holds its first
// turn: after a restart, another branch's tail, a conversation never
// stored or deleted, it stores nothing and says so, and the whole
// history ingested then is all there.
func TestStoreIngestAfter(t *testing.T) {
	eachBackend(t, func(t *testing.T, at StoreConfig) {
		ctx := context.Background()
		s := openAt(t, at)
		key := Key{Tenant: "t1", Conversation: "c1"}
		turns := team(20)
		stored := func(want int) {
			t.Helper()
			got, err := s.Turns(ctx, key)
			if err != nil || len(got) != want {
				t.Fatalf("Turns = %d, %v; want %d", len(got), err, want)
			}
		}
		after := func(name string, tail []Turn, wantN int, wantHeld bool) {
			t.Helper()
			n, held, err := s.IngestAfter(ctx, key, tail)
			if err != nil || n != wantN || held != wantHeld {
				t.Fatalf("%s: IngestAfter = %d, %v, %v; want %d, %v", name, n, held, err, wantN, wantHeld)
			}
		}
		after("never stored", turns[10:20], 0, false)
		if ok, err := s.Delete(ctx, key); err != nil || ok {
			t.Fatalf("never stored: Delete = %v, %v; want nothing there", ok, err)
		}
		if n, err := s.Ingest(ctx, key, turns[:30]); err != nil || n != 30 {
			t.Fatalf("Ingest = %d, %v", n, err)
		}
		after("the tail after the last stored", turns[29:35], 5, true)
		after("the same again", turns[29:35], 0, true)
		stored(35)

		edited, _ := Linked(turns[33].Parent, append([]Turn{{Pos: turns[33].Pos, Role: "user", Text: "Something else entirely."}}, turns[34:40]...))
		after("another branch's tail", edited, 0, false)
		stored(35)

		_ = s.Close()
		s = openAt(t, at) // a restart: no branch in memory
		after("after a restart", turns[34:40], 0, false)
		stored(35)
		if n, err := s.Ingest(ctx, key, turns); err != nil || n != len(turns)-35 {
			t.Fatalf("whole after restart: Ingest = %d, %v; want %d", n, err, len(turns)-35)
		}
		stored(len(turns))
		after("held again", turns[len(turns)-1:], 0, true)

		if ok, err := s.Delete(ctx, key); err != nil || !ok {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		after("deleted", turns[len(turns)-1:], 0, false)
		stored(0)
	})
}
