package kvcache

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// ttlStore is a store with a TTL on clock, its snapshots mirrored into a
// registry as the engine does (OnEvict drops them), so a test can ask both.
type ttlStore struct {
	*Store
	reg   *Registry
	keyer *Keyer
}

func openTTLStore(t *testing.T, dir string, ttl time.Duration, clock *fakeClock) (*ttlStore, []SavedSnapshot) {
	t.Helper()
	s, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 7, TTL: ttl, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ts := &ttlStore{Store: s, reg: mustRegistry(t, BackendConfig{Name: "e"}), keyer: mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})}
	s.OnEvict(func(id string) { ts.reg.RemoveSnapshot("e", id) })
	for _, e := range existing {
		if err := ts.reg.AddSnapshot("e", e.ID, ts.keyer.ForTenant(e.Owner.Tenant).Tokens(e.Tokens), e.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	return ts, existing
}

// save writes a snapshot of toks for owner and records it in the registry.
func (ts *ttlStore) save(t *testing.T, owner Owner, toks []int) string {
	t.Helper()
	saved, err := saveOwned(t, ts.Store, owner, toks, fakeState(4000, byte(toks[0])))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.reg.AddSnapshot("e", saved.ID, ts.keyer.ForTenant(owner.Tenant).Tokens(toks), saved.Bytes); err != nil {
		t.Fatal(err)
	}
	return saved.ID
}

// offered reports whether a lookup of toks finds the snapshot id.
func (ts *ttlStore) offered(owner Owner, toks []int, id string) bool {
	for _, m := range ts.reg.Lookup(ts.keyer.ForTenant(owner.Tenant).Tokens(toks)).Matches {
		if m.Tier == TierSnapshot && m.Snapshot == id {
			return true
		}
	}
	return false
}

// present says whether a snapshot is kept everywhere it should be (file,
// store, registry), failing if it is kept in some places only.
func (ts *ttlStore) present(t *testing.T, owner Owner, toks []int, id string) bool {
	t.Helper()
	_, statErr := os.Stat(ts.path(id))
	file := statErr == nil
	offered := ts.offered(owner, toks, id)
	ts.mu.Lock()
	indexed := ts.files[id] != nil
	ts.mu.Unlock()
	if file != offered || file != indexed {
		t.Fatalf("snapshot %s: file %v, in the store's index %v, offered by Lookup %v", id, file, indexed, offered)
	}
	return file
}

func TestExpireDeletesSnapshotsIdlePastTTL(t *testing.T) {
	const ttl = time.Hour
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, t.TempDir(), ttl, clock)
	idle, busy, restored := Owner{Tenant: "t", Conversation: "idle"}, Owner{Tenant: "t", Conversation: "busy"}, Owner{Tenant: "t", Conversation: "restored"}
	toks := map[Owner][]int{idle: tokens(1, 64), busy: tokens(2, 64), restored: tokens(3, 64)}
	ids := map[Owner]string{}
	for _, o := range []Owner{idle, restored} {
		ids[o] = ts.save(t, o, toks[o])
	}
	clock.advance(40 * time.Minute)
	ids[busy] = ts.save(t, busy, toks[busy]) // saved 40 minutes after the others
	if _, err := ts.Load(ids[restored]); err != nil {
		t.Fatal(err) // a restore at 40 minutes: its age starts again
	}
	before := ts.Bytes()
	clock.advance(30 * time.Minute) // idle: 70 min; busy and restored: 30 min
	gone := ts.Expire()
	if !slices.Equal(gone, []string{ids[idle]}) {
		t.Fatalf("expired %v, want only the idle snapshot %s", gone, ids[idle])
	}
	for o, want := range map[Owner]bool{idle: false, busy: true, restored: true} {
		if got := ts.present(t, o, toks[o], ids[o]); got != want {
			t.Fatalf("%s present after the sweep: %v, want %v", o.Conversation, got, want)
		}
	}
	if _, err := ts.Load(ids[idle]); err == nil {
		t.Fatal("an expired snapshot still loads")
	}
	if after := ts.Bytes(); after >= before || after <= 0 {
		t.Fatalf("store bytes %d → %d: the idle snapshot's should be subtracted", before, after)
	}
	// Exactly at the TTL a snapshot is kept; past it, it goes.
	clock.advance(30 * time.Minute) // busy and restored: 60 min
	if gone := ts.Expire(); len(gone) != 0 {
		t.Fatalf("expired %v at exactly the TTL", gone)
	}
	clock.advance(time.Nanosecond)
	if gone := ts.Expire(); len(gone) != 2 || ts.Bytes() != 0 {
		t.Fatalf("expired %v, %d bytes left; want both, none", gone, ts.Bytes())
	}
}

func TestExpireWithoutTTLKeepsEverything(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, t.TempDir(), 0, clock)
	o, toks := Owner{Tenant: "t", Conversation: "c"}, tokens(4, 64)
	id := ts.save(t, o, toks)
	clock.advance(10 * 365 * 24 * time.Hour)
	if gone := ts.Expire(); len(gone) != 0 || !ts.present(t, o, toks, id) {
		t.Fatalf("no TTL: expired %v", gone)
	}
}

// TestExpireAgesSurviveRestart: the last use is the file's modification
// time, so a store opened again sees the same ages: a snapshot idle past
// the TTL while the server was down is deleted at open (and not listed for
// the registry), one restored before the restart is kept.
func TestExpireAgesSurviveRestart(t *testing.T) {
	const ttl = time.Hour
	dir := t.TempDir()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, dir, ttl, clock)
	old, used := Owner{Tenant: "t", Conversation: "old"}, Owner{Tenant: "t", Conversation: "used"}
	oldID := ts.save(t, old, tokens(5, 64))
	usedID := ts.save(t, used, tokens(6, 64))
	clock.advance(50 * time.Minute)
	if _, err := ts.Load(usedID); err != nil {
		t.Fatal(err)
	}
	ts.Close()
	for id, want := range map[string]time.Time{oldID: clock.now.Add(-50 * time.Minute), usedID: clock.now} {
		st, err := os.Stat(ts.path(id))
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(want) {
			t.Fatalf("%s: modification time %v, want the last use %v", id, st.ModTime(), want)
		}
	}

	clock.advance(20 * time.Minute) // down for 20 minutes: old is 70 minutes idle, used 20
	ts2, existing := openTTLStore(t, dir, ttl, clock)
	if len(existing) != 1 || existing[0].ID != usedID {
		t.Fatalf("reopened with %+v, want only %s", existing, usedID)
	}
	if _, err := os.Stat(ts2.path(oldID)); !os.IsNotExist(err) {
		t.Fatalf("the snapshot idle past the TTL is still on disk: %v", err)
	}
	if !ts2.present(t, used, tokens(6, 64), usedID) {
		t.Fatal("the used snapshot is gone")
	}
	// Its age carried over: 20 minutes now, so it expires 40 minutes on, not 60.
	clock.advance(40*time.Minute + time.Nanosecond)
	if gone := ts2.Expire(); !slices.Equal(gone, []string{usedID}) {
		t.Fatalf("expired %v, want %s (its age did not survive the restart)", gone, usedID)
	}
}

func TestExpireSparesASaveInFlight(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, t.TempDir(), time.Hour, clock)
	o, toks := Owner{Tenant: "t", Conversation: "c"}, tokens(7, 64)
	id := ts.save(t, o, toks)
	clock.advance(2 * time.Hour)
	ts.mu.Lock()
	ts.pending[id] = make(chan struct{}) // a save of the same content under way
	ts.mu.Unlock()
	if gone := ts.Expire(); len(gone) != 0 {
		t.Fatalf("expired %v while it was being saved again", gone)
	}
	ts.mu.Lock()
	delete(ts.pending, id)
	ts.mu.Unlock()
	if gone := ts.Expire(); !slices.Equal(gone, []string{id}) {
		t.Fatalf("expired %v once the save ended, want %s", gone, id)
	}
}

func TestExpireInterval(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{720 * time.Hour, time.Hour},
		{2 * time.Hour, 30 * time.Minute},
		{time.Second, time.Second},
	} {
		if got := ExpireInterval(tc.ttl); got != tc.want {
			t.Errorf("ExpireInterval(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

func TestStoreRefusesNegativeTTL(t *testing.T) {
	if _, _, err := OpenStore(StoreConfig{Dir: t.TempDir(), TTL: -time.Second}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a negative TTL: %v, want ErrInvalidConfig", err)
	}
}

// TestFlushWaitsForQueuedSaves: after Flush, a save queued before it is on
// disk, with the time of its write as its last use.
func TestFlushWaitsForQueuedSaves(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, t.TempDir(), time.Hour, clock)
	toks := tokens(8, 64)
	if !ts.Save(Owner{Tenant: "t", Conversation: "c"}, toks, fakeState(4000, 3), nil) {
		t.Fatal("save queue full")
	}
	ts.Flush()
	id := SnapshotID(Owner{Tenant: "t", Conversation: "c"}, toks)
	if ts.Pending(id) || !ts.Has(id) {
		t.Fatalf("after Flush: pending %v, on disk %v", ts.Pending(id), ts.Has(id))
	}
}

// TestExpireDir: a directory whose store is closed (a model not loaded) is
// swept by the files' modification times, which the store kept as their
// last uses; other files are left alone.
func TestExpireDir(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts, _ := openTTLStore(t, dir, time.Hour, clock)
	oldID := ts.save(t, Owner{Tenant: "t", Conversation: "old"}, tokens(9, 64))
	clock.advance(45 * time.Minute)
	newID := ts.save(t, Owner{Tenant: "t", Conversation: "new"}, tokens(10, 64))
	ts.Close()
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, time.Time{}, clock.now.Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock.advance(30 * time.Minute) // old: 75 minutes, new: 30
	n, err := ExpireDir(dir, clock.now.Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("ExpireDir = %d, %v; want 1", n, err)
	}
	for path, want := range map[string]bool{ts.path(oldID): false, ts.path(newID): true, other: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Fatalf("%s: exists %v, want %v", filepath.Base(path), err == nil, want)
		}
	}
	if n, err := ExpireDir(filepath.Join(dir, "missing"), clock.now); n != 0 || err != nil {
		t.Fatalf("a missing dir: %d, %v", n, err)
	}
}
