package kvcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func openTestStore(t *testing.T, dir string, fp uint64, maxBytes int64) (*Store, []SavedSnapshot) {
	t.Helper()
	s, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: fp, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, existing
}

// testOwner owns the snapshots of tests that are not about owners.
var testOwner = Owner{Tenant: "default", Conversation: "c"}

// saveSync saves for testOwner and waits for the writer.
func saveSync(t *testing.T, s *Store, tokens []int, state []byte) (SavedSnapshot, error) {
	t.Helper()
	return saveOwned(t, s, testOwner, tokens, state)
}

// saveOwned saves for owner and waits for the writer.
func saveOwned(t *testing.T, s *Store, owner Owner, tokens []int, state []byte) (SavedSnapshot, error) {
	t.Helper()
	type res struct {
		s   SavedSnapshot
		err error
	}
	ch := make(chan res, 1)
	if !s.Save(owner, tokens, state, func(saved SavedSnapshot, err error) { ch <- res{saved, err} }) {
		t.Fatal("save queue full")
	}
	r := <-ch
	return r.s, r.err
}

func fakeState(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestStoreRoundTripAndReindex(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStore(t, dir, 42, 0)
	tokens := tokens(5, 300)
	state := fakeState(10000, 1)
	saved, err := saveSync(t, s, tokens, state)
	if err != nil {
		t.Fatal(err)
	}
	if saved.ID != SnapshotID(testOwner, tokens) || saved.Bytes <= 0 || s.Bytes() != saved.Bytes {
		t.Fatalf("saved %+v, store bytes %d", saved, s.Bytes())
	}
	got, err := s.Load(saved.ID)
	if err != nil || !slices.Equal(got.Tokens, tokens) || !slices.Equal(got.State, state) || got.Owner != testOwner {
		t.Fatalf("load: err %v, tokens equal %v, state equal %v, owner %+v", err, slices.Equal(got.Tokens, tokens), slices.Equal(got.State, state), got.Owner)
	}
	s.Close()
	s2, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 42})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(existing) != 1 || existing[0].ID != saved.ID || !slices.Equal(existing[0].Tokens, tokens) || existing[0].Owner != testOwner {
		t.Fatalf("reindexed %+v", existing)
	}
}

func TestStoreRejectsBadFiles(t *testing.T) {
	tests := []struct {
		name   string
		damage func(path string) error
		want   error
	}{
		{"a flipped byte in the state", func(p string) error {
			b, _ := os.ReadFile(p)
			b[len(b)-5] ^= 0xff
			return os.WriteFile(p, b, 0o644)
		}, ErrSnapshotCorrupt},
		{"a flipped token id", func(p string) error {
			b, _ := os.ReadFile(p)
			b[snapHeader+len(encodeOwner(testOwner))+2] ^= 0x01
			return os.WriteFile(p, b, 0o644)
		}, ErrSnapshotCorrupt},
		{"a changed owner", func(p string) error {
			b, _ := os.ReadFile(p)
			b[snapHeader] ^= 0x01 // "default" → "eefault": another tenant's
			return os.WriteFile(p, b, 0o644)
		}, ErrSnapshotCorrupt},
		{"truncated", func(p string) error {
			b, _ := os.ReadFile(p)
			return os.WriteFile(p, b[:len(b)/2], 0o644)
		}, ErrSnapshotCorrupt},
		{"not a snapshot", func(p string) error { return os.WriteFile(p, []byte("hello"), 0o644) }, ErrSnapshotCorrupt},
		{"unreadable (a directory in its place)", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}, ErrSnapshotCorrupt},
		{"deleted behind the store's back", os.Remove, ErrSnapshotMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := openTestStore(t, dir, 7, 0)
			saved, err := saveSync(t, s, tokens(1, 64), fakeState(4096, 3))
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.damage(s.path(saved.ID)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Load(saved.ID); !errors.Is(err, tt.want) {
				t.Fatalf("load: %v, want %v", err, tt.want)
			}
			if s.Has(saved.ID) {
				t.Fatal("bad snapshot still indexed")
			}
			if fi, err := os.Stat(s.path(saved.ID)); err == nil && !fi.IsDir() {
				t.Fatal("bad snapshot file not deleted")
			}
		})
	}
}

func TestStoreDeletesAnotherModelsSnapshots(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStore(t, dir, 1, 0)
	saved, err := saveSync(t, s, tokens(0, 32), fakeState(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	other, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if len(existing) != 0 {
		t.Fatalf("another model's snapshot indexed: %+v", existing)
	}
	if _, err := os.Stat(filepath.Join(dir, saved.ID+snapExt)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("another model's snapshot kept: %v", err)
	}
}

func TestStoreDiskFullDropsTheSaveCleanly(t *testing.T) {
	s, _ := openTestStore(t, t.TempDir(), 1, 0)
	s.createTemp = func(string, string) (*os.File, error) { return os.OpenFile("/dev/full", os.O_WRONLY, 0) }
	_, err := saveSync(t, s, tokens(0, 32), fakeState(1000, 0))
	if err == nil {
		t.Fatal("save to a full disk reported success")
	}
	if s.Bytes() != 0 || s.Has(SnapshotID(testOwner, tokens(0, 32))) {
		t.Fatal("a failed save is indexed")
	}
}

func TestStoreReadOnlyDirFailsToOpen(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenStore(StoreConfig{Dir: filepath.Join(blocker, "snapshots"), Fingerprint: 1}); err == nil {
		t.Fatal("opened a store under a file")
	}
}

func TestStoreEvictsLeastRecentlyUsedWithinBudget(t *testing.T) {
	s, _ := openTestStore(t, t.TempDir(), 1, 0)
	var sizes []int64
	var ids []string
	for i := range 3 {
		saved, err := saveSync(t, s, tokens(uint64(i*100), 16), fakeState(3000, byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, saved.Bytes)
		ids = append(ids, saved.ID)
	}
	s.Has(ids[0]) // the first is used again: the second is now the oldest
	var evicted []string
	s.OnEvict(func(id string) { evicted = append(evicted, id) })
	s.cfg.MaxBytes = sizes[0] + sizes[1] + sizes[2] + 10
	saved, err := saveSync(t, s, tokens(999, 16), fakeState(3000, 9))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(evicted) != fmt.Sprint([]string{ids[1]}) {
		t.Fatalf("evicted %v, want [%s]", evicted, ids[1])
	}
	if !s.Has(ids[0]) || !s.Has(ids[2]) || !s.Has(saved.ID) || s.Has(ids[1]) {
		t.Fatal("wrong snapshots kept")
	}
	if s.Bytes() > s.cfg.MaxBytes {
		t.Fatalf("store holds %d bytes over its budget %d", s.Bytes(), s.cfg.MaxBytes)
	}
}

func TestStoreOwnersKeepSnapshotsApart(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStore(t, dir, 9, 0)
	a1 := Owner{Tenant: "a", Conversation: "one"}
	a2 := Owner{Tenant: "a", Conversation: "two"}
	b1 := Owner{Tenant: "b", Conversation: "one"}
	same := tokens(3, 64)
	var ids []string
	for i, o := range []Owner{a1, a2, b1} {
		saved, err := saveOwned(t, s, o, same, fakeState(512, byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, saved.ID)
	}
	if ids[0] == ids[1] || ids[0] == ids[2] || ids[1] == ids[2] {
		t.Fatalf("the same tokens of three owners share a snapshot: %v", ids)
	}
	before := s.Bytes()
	gone := s.DeleteOwned(a1)
	if !slices.Equal(gone, []string{ids[0]}) || s.Has(ids[0]) || !s.Has(ids[1]) || !s.Has(ids[2]) || s.Bytes() >= before {
		t.Fatalf("deleted %v of %v; left a2 %v b1 %v; bytes %d → %d", gone, ids, s.Has(ids[1]), s.Has(ids[2]), before, s.Bytes())
	}
	if _, err := s.Load(ids[0]); !errors.Is(err, ErrSnapshotMissing) {
		t.Fatalf("a deleted conversation's snapshot loads: %v", err)
	}
	got, err := s.Load(ids[2])
	if err != nil || got.Owner != b1 {
		t.Fatalf("b's snapshot: owner %+v, err %v", got.Owner, err)
	}
	s.Close()
	_, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 9})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[Owner]bool{}
	for _, e := range existing {
		owners[e.Owner] = true
	}
	if len(existing) != 2 || !owners[a2] || !owners[b1] {
		t.Fatalf("reindexed owners %v", owners)
	}
}

// Deleting an owner cancels its saves: one being written (its file is
// removed once written) and one still queued (never written), each done
// with ErrSaveCancelled; another owner's queued save is written.
func TestStoreDeleteOwnedCancelsQueuedSaves(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStore(t, dir, 9, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	s.createTemp = func(dir, pattern string) (*os.File, error) {
		if first { // the writer goroutine only
			first = false
			close(entered)
			<-release
		}
		return os.CreateTemp(dir, pattern)
	}
	a, b := Owner{Tenant: "t", Conversation: "deleted"}, Owner{Tenant: "t", Conversation: "kept"}
	type res struct {
		id  string
		err error
	}
	done := make(chan res, 3)
	save := func(o Owner, seed int) string {
		toks := tokens(uint64(seed), 64)
		id := SnapshotID(o, toks)
		if !s.Save(o, toks, fakeState(512, byte(seed)), func(_ SavedSnapshot, err error) { done <- res{id, err} }) {
			t.Fatal("save queue full")
		}
		return id
	}
	writing := save(a, 1)
	<-entered // the first save is being written
	queued, other := save(a, 2), save(b, 3)
	gone := s.DeleteOwned(a)
	want := []string{writing, queued}
	slices.Sort(want)
	if !slices.Equal(gone, want) {
		t.Fatalf("DeleteOwned: %v, want the two saves of the deleted owner %v", gone, want)
	}
	close(release)
	got := map[string]error{}
	for range 3 {
		r := <-done
		got[r.id] = r.err
	}
	if !errors.Is(got[writing], ErrSaveCancelled) || !errors.Is(got[queued], ErrSaveCancelled) || got[other] != nil {
		t.Fatalf("results: being written %v, queued %v, other owner's %v", got[writing], got[queued], got[other])
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || filepath.Base(files[0]) != other+snapExt || s.Has(writing) || s.Has(queued) {
		t.Fatalf("on disk %v: want only %s", files, other)
	}
}

// A conversation saved again after it went on holds all its older
// snapshot holds: the older one is deleted (and told to OnEvict), in
// either tier. Another owner's, and a branch that does not begin the new
// tokens, are kept; and so is the new one after a restart.
func TestStoreDropsTheSnapshotsASaveExtends(t *testing.T) {
	for _, ram := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprint("ram=", ram), func(t *testing.T) {
			dir := t.TempDir()
			s, _, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 7, RAMBytes: ram, TenantShare: 1})
			if err != nil {
				t.Fatal(err)
			}
			var evicted []string
			s.OnEvict(func(id string) { evicted = append(evicted, id) })
			other := Owner{Tenant: "default", Conversation: "other"}
			long := tokens(5, 600)
			branch := append(tokens(5, 299), 99999) // leaves long at its last token
			old, err1 := saveSync(t, s, long[:300], fakeState(2000, 1))
			br, err2 := saveSync(t, s, branch, fakeState(2000, 2))
			theirs, err3 := saveOwned(t, s, other, long[:300], fakeState(2000, 3))
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			if len(evicted) != 0 {
				t.Fatalf("evicted %v before any save extends them", evicted)
			}
			now, err := saveSync(t, s, long, fakeState(4000, 4))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(evicted, []string{old.ID}) {
				t.Fatalf("evicted %v, want only the extended %s", evicted, old.ID)
			}
			for _, c := range []struct {
				id   string
				want bool
			}{{old.ID, false}, {br.ID, true}, {theirs.ID, true}, {now.ID, true}} {
				if got := s.Has(c.id); got != c.want {
					t.Errorf("Has(%s) = %v, want %v", c.id, got, c.want)
				}
			}
			if _, err := os.Stat(s.path(old.ID)); !os.IsNotExist(err) {
				t.Errorf("the extended snapshot's file is still there: %v", err)
			}
			if l, err := s.Load(now.ID); err != nil || !slices.Equal(l.Tokens, long) {
				t.Fatalf("the new snapshot: %v (%d tokens)", err, len(l.Tokens))
			}
			s.Close()
			_, existing := openTestStore(t, dir, 7, 0)
			var ids []string
			for _, e := range existing {
				ids = append(ids, e.ID)
			}
			if ram == 0 && (slices.Contains(ids, old.ID) || !slices.Contains(ids, now.ID)) {
				t.Fatalf("after a restart the store holds %v", ids)
			}
		})
	}
}
