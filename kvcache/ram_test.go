package kvcache

import (
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// openRAMStore opens a store with a RAM tier of ramBytes on a clock that
// ticks a second a reading, so last uses are ordered.
func openRAMStore(t *testing.T, dir string, ramBytes int64, share float64) *Store {
	t.Helper()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Second); return now }
	s, _, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 7, MaxBytes: 1 << 30, RAMBytes: ramBytes, TenantShare: share, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ids(snaps []SavedSnapshot) []string {
	out := make([]string, len(snaps))
	for i, sn := range snaps {
		out[i] = sn.ID
	}
	return out
}

// A save goes to RAM, the least recently used is demoted to disk when the
// budget needs room, and a restore reads either tier.
func TestRAMTierDemotesOldestAndRestoresBoth(t *testing.T) {
	dir := t.TempDir()
	// Learn one snapshot's size, then budget RAM for two of them.
	probe := openRAMStore(t, t.TempDir(), 1<<30, 1)
	one, err := saveSync(t, probe, tokens(1, 300), fakeState(20000, 1))
	if err != nil || one.Medium != MediumRAM {
		t.Fatalf("probe save %+v, %v", one, err)
	}
	s := openRAMStore(t, dir, 2*one.Bytes+one.Bytes/2, 1)
	var demoted []string
	s.OnDemote(func(id string) { demoted = append(demoted, id) })
	var saved []SavedSnapshot
	for i := range 3 {
		sv, err := saveSync(t, s, tokens(uint64(1+i*1000), 300), fakeState(20000, byte(i)))
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, sv)
	}
	if got := ids(s.Held(MediumDisk)); !slices.Equal(got, []string{saved[0].ID}) || !slices.Equal(demoted, got) {
		t.Fatalf("on disk %v, demoted %v; want the oldest, %s", got, demoted, saved[0].ID)
	}
	if len(s.Held(MediumRAM)) != 2 || s.RAMBytes() != saved[1].Bytes+saved[2].Bytes || s.Bytes() != saved[0].Bytes {
		t.Fatalf("RAM %v (%d bytes), disk %d bytes", ids(s.Held(MediumRAM)), s.RAMBytes(), s.Bytes())
	}
	for i, sv := range saved {
		l, err := s.Load(sv.ID)
		want := MediumRAM
		if i == 0 {
			want = MediumDisk
		}
		if err != nil || l.Medium != want || !slices.Equal(l.State, fakeState(20000, byte(i))) {
			t.Fatalf("load %d: medium %v (want %v), err %v", i, l.Medium, want, err)
		}
	}
}

// One tenant's snapshots hold at most TenantShare of the RAM budget: its
// own oldest are demoted, never another tenant's.
func TestRAMTierTenantShare(t *testing.T) {
	probe := openRAMStore(t, t.TempDir(), 1<<30, 1)
	one, _ := saveSync(t, probe, tokens(1, 300), fakeState(20000, 1))
	s := openRAMStore(t, t.TempDir(), 4*one.Bytes+one.Bytes/2, 0.5) // a tenant: two snapshots
	quiet := Owner{Tenant: "quiet", Conversation: "q"}
	q, err := saveOwned(t, s, quiet, tokens(9000, 300), fakeState(20000, 9))
	if err != nil {
		t.Fatal(err)
	}
	loud := Owner{Tenant: "loud", Conversation: "l"}
	for i := range 4 {
		if _, err := saveOwned(t, s, loud, tokens(uint64(1+i*1000), 300), fakeState(20000, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if m, ok := s.Where(q.ID); !ok || m != MediumRAM {
		t.Fatalf("the quiet tenant's snapshot is in %v (held %v); want ram", m, ok)
	}
	var loudRAM int64
	for _, sn := range s.Held(MediumRAM) {
		if sn.Owner == loud {
			loudRAM += sn.Bytes
		}
	}
	if loudRAM > s.tenantCap() || len(s.Held(MediumDisk)) != 2 {
		t.Fatalf("loud holds %d bytes of RAM (cap %d); %d on disk", loudRAM, s.tenantCap(), len(s.Held(MediumDisk)))
	}
}

// Deleting a conversation removes its snapshots from both tiers; a
// restart starts with an empty RAM tier and the disk tier as it was.
func TestRAMTierDeleteAndRestart(t *testing.T) {
	dir := t.TempDir()
	probe := openRAMStore(t, t.TempDir(), 1<<30, 1)
	one, _ := saveSync(t, probe, tokens(1, 300), fakeState(20000, 1))
	s := openRAMStore(t, dir, one.Bytes+one.Bytes/2, 1)
	gone, kept := Owner{Tenant: "t", Conversation: "gone"}, Owner{Tenant: "t", Conversation: "kept"}
	for i, o := range []Owner{gone, kept, gone, kept} {
		if _, err := saveOwned(t, s, o, tokens(uint64(1+i*1000), 300), fakeState(20000, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.DeleteOwned(gone)); n != 2 {
		t.Fatalf("deleted %d snapshots, want 2", n)
	}
	for _, m := range []Medium{MediumRAM, MediumDisk} {
		for _, sn := range s.Held(m) {
			if sn.Owner == gone {
				t.Fatalf("%v still holds %s of the deleted conversation", m, sn.ID)
			}
		}
	}
	if n, err := DeleteOwnedDir(dir, gone); err != nil || n != 0 {
		t.Fatalf("files of the deleted conversation left on disk: %d, %v", n, err)
	}
	ram, disk := ids(s.Held(MediumRAM)), ids(s.Held(MediumDisk))
	s.Close()
	s2, existing, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: 7, RAMBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(ram) != 1 || s2.RAMBytes() != 0 || !slices.Equal(ids(existing), disk) {
		t.Fatalf("before: RAM %v, disk %v; after restart: RAM %d bytes, found %v", ram, disk, s2.RAMBytes(), ids(existing))
	}
}

// A RAM snapshot not used for the TTL expires as a file does, and the
// store says so (OnEvict), so the engine drops it from the registry and
// the journal.
func TestRAMTierExpires(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, _, err := OpenStore(StoreConfig{Dir: t.TempDir(), Fingerprint: 7, RAMBytes: 1 << 30, TTL: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var evicted []string
	s.OnEvict(func(id string) { evicted = append(evicted, id) })
	sv, err := saveSync(t, s, tokens(3, 300), fakeState(20000, 3))
	if err != nil || sv.Medium != MediumRAM {
		t.Fatalf("saved %+v, %v", sv, err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if gone := s.Expire(); !slices.Equal(gone, []string{sv.ID}) || !slices.Equal(evicted, gone) || s.RAMBytes() != 0 {
		t.Fatalf("expired %v, evicted %v, %d bytes left in RAM", gone, evicted, s.RAMBytes())
	}
}

// BenchmarkStoreLoad restores a 4 MiB state of incompressible KV-like
// bytes from each tier: what a RAM tier saves is the file read.
func BenchmarkStoreLoad(b *testing.B) {
	state := make([]byte, 4<<20)
	for i := range state {
		state[i] = byte(uint64(i)*0x9E3779B97F4A7C15>>56) ^ byte(i>>3)
	}
	for _, tc := range []struct {
		name string
		ram  int64
	}{{"ram", 1 << 30}, {"disk", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			s, _, err := OpenStore(StoreConfig{Dir: b.TempDir(), Fingerprint: 7, RAMBytes: tc.ram})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			done := make(chan SavedSnapshot, 1)
			s.Save(testOwner, tokens(1, 4096), state, func(sv SavedSnapshot, _ error) { done <- sv })
			sv := <-done
			b.SetBytes(int64(len(state)))
			b.ResetTimer()
			for range b.N {
				if _, err := s.Load(sv.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A delete while a snapshot is being demoted from RAM to disk sticks: the
// file written meanwhile is removed, and the snapshot is in neither tier.
func TestRAMTierDeleteDuringDemotionSticks(t *testing.T) {
	dir := t.TempDir()
	probe := openRAMStore(t, t.TempDir(), 1<<30, 1)
	one, _ := saveSync(t, probe, tokens(1, 300), fakeState(20000, 1))
	s := openRAMStore(t, dir, one.Bytes+one.Bytes/2, 1)
	gone := Owner{Tenant: "t", Conversation: "gone"}
	old, err := saveOwned(t, s, gone, tokens(1, 300), fakeState(20000, 1))
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	create := s.createTemp
	s.mu.Lock()
	s.createTemp = func(dir, pattern string) (*os.File, error) {
		close(entered)
		<-release
		return create(dir, pattern)
	}
	s.mu.Unlock()
	done := make(chan error, 1)
	s.Save(testOwner, tokens(2000, 300), fakeState(20000, 2), func(_ SavedSnapshot, err error) { done <- err })
	select { // the new save pushes the old one out of RAM: its demotion is writing
	case <-entered:
	case <-time.After(3 * time.Minute):
		t.Fatal("no demotion started")
	}
	if ids := s.DeleteOwned(gone); !slices.Equal(ids, []string{old.ID}) {
		t.Fatalf("deleted %v during the demotion, want %s", ids, old.ID)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, held := s.Where(old.ID); held {
		t.Fatal("the deleted snapshot is held after its demotion")
	}
	if n, _ := DeleteOwnedDir(dir, gone); n != 0 {
		t.Fatalf("%d files of the deleted conversation on disk", n)
	}
}
