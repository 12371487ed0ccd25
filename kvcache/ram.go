package kvcache

// The RAM tier of the snapshot store: a snapshot is first kept in host
// memory, as the very bytes its file would hold, and written to disk only
// when the RAM budget needs its room (demoted, least recently used first).
// A restore from RAM skips the disk read; the zstd decode and the checks
// are the same as from disk (invariant 2 holds for both tiers).
//
// Invariants, whenever s.mu is not held (see store.go for the rest):
//
//  R1. s.ramBytes is the sum of the sizes of the files whose mem is set,
//      and s.tenantRAM[t] that sum over tenant t's; a file is in exactly one
//      tier: mem set (RAM) or not (disk, counted in s.bytes).
//  R2. After every save: s.ramBytes <= RAMBytes and every tenant holds at
//      most TenantShare × RAMBytes, so one tenant cannot push every other
//      tenant's snapshots to disk.
//  R3. A snapshot being demoted is pending (Load waits for it) and queued
//      under its owner (DeleteOwned cancels it), exactly as a save being
//      written: a delete sticks whichever tier the snapshot is in or
//      moving between.
//  R4. Deleting, expiring and a restart empty the RAM tier as they do the
//      disk: RAM entries live only in s.files, and a new process starts
//      with none.

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"
)

// Medium is where a snapshot's bytes are: in host RAM or on disk.
type Medium uint8

// Media, fastest first.
const (
	MediumRAM Medium = iota
	MediumDisk
)

// String returns "ram" or "disk".
func (m Medium) String() string {
	if m == MediumRAM {
		return "ram"
	}
	return "disk"
}

// MarshalText writes the medium as "ram" or "disk".
func (m Medium) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads "ram" or "disk".
func (m *Medium) UnmarshalText(b []byte) error {
	switch string(b) {
	case "ram":
		*m = MediumRAM
	case "disk":
		*m = MediumDisk
	default:
		return fmt.Errorf("kvcache: snapshot medium %q: %w", b, ErrInvalidConfig)
	}
	return nil
}

// DefaultTenantShare is the share of the RAM budget one tenant may hold
// when StoreConfig.TenantShare is 0.
const DefaultTenantShare = 0.5

// tenantCap is the most RAM one tenant's snapshots may take.
func (s *Store) tenantCap() int64 {
	return int64(float64(s.cfg.RAMBytes) * s.cfg.TenantShare)
}

// keepInRAM reports whether a new snapshot of size bytes for owner goes
// to RAM: there is a RAM tier and the snapshot fits the tenant's share.
func (s *Store) keepInRAM(size int64) bool {
	return s.cfg.RAMBytes > 0 && size <= s.tenantCap()
}

// putRAM indexes image as id's snapshot in RAM. Callers hold s.mu.
func (s *Store) putRAM(id string, owner Owner, tokens int, image []byte, used time.Time) {
	s.unindex(id)
	size := int64(len(image))
	s.files[id] = &storeFile{owner: owner, tokens: tokens, bytes: size, used: used, mem: image}
	s.ramBytes += size
	s.tenantRAM[owner.Tenant] += size
}

// unindex removes id from the index and from its tier's byte counts and
// returns what it was (nil if absent). It removes no file. Callers hold
// s.mu.
func (s *Store) unindex(id string) *storeFile {
	f := s.files[id]
	if f == nil {
		return nil
	}
	if f.mem != nil {
		s.ramBytes -= f.bytes
		if s.tenantRAM[f.owner.Tenant] -= f.bytes; s.tenantRAM[f.owner.Tenant] <= 0 {
			delete(s.tenantRAM, f.owner.Tenant)
		}
	} else {
		s.bytes -= f.bytes
	}
	delete(s.files, id)
	return f
}

// ramVictim returns the RAM snapshot to demote next, sparing keep, or ""
// when the budget and every tenant's share hold (R2): the least recently
// used of a tenant over its share, else of all.
func (s *Store) ramVictim(keep string) string {
	over := ""
	for t, n := range s.tenantRAM {
		if n > s.tenantCap() && (over == "" || t < over) {
			over = t
		}
	}
	if over == "" && s.ramBytes <= s.cfg.RAMBytes {
		return ""
	}
	oldest := ""
	for id, f := range s.files {
		if f.mem == nil || id == keep || over != "" && f.owner.Tenant != over {
			continue
		}
		if oldest == "" || f.used.Before(s.files[oldest].used) || f.used.Equal(s.files[oldest].used) && id < oldest {
			oldest = id
		}
	}
	return oldest
}

// trimRAM demotes snapshots to disk until R2 holds, sparing keep. It runs
// on the writer goroutine and blocks on disk writes.
func (s *Store) trimRAM(keep string) {
	for {
		s.mu.Lock()
		id := s.ramVictim(keep)
		s.mu.Unlock()
		if id == "" {
			return
		}
		s.demote(id)
	}
}

// demote writes a RAM snapshot to disk (R3), then trims the disk budget.
// A write that fails loses the snapshot: it is evicted, as the disk
// budget evicts.
func (s *Store) demote(id string) {
	s.mu.Lock()
	f := s.unindex(id)
	if f == nil {
		s.mu.Unlock()
		return
	}
	done := make(chan struct{})
	s.pending[id], s.queued[id] = done, f.owner
	s.mu.Unlock()

	err := s.writeFile(id, f.mem, f.used)
	if err == nil && int64(len(f.mem)) > s.cfg.MaxBytes {
		err = fmt.Errorf("snapshot of %d bytes exceeds the disk budget of %d", len(f.mem), s.cfg.MaxBytes)
		removeFile(s.path(id))
	}

	s.mu.Lock()
	cancelled := s.cancelled[id]
	delete(s.pending, id)
	delete(s.queued, id)
	delete(s.cancelled, id)
	close(done)
	if err == nil && !cancelled {
		s.files[id] = &storeFile{owner: f.owner, tokens: f.tokens, bytes: int64(len(f.mem)), used: f.used}
		s.bytes += int64(len(f.mem))
	}
	onEvict, onDemote := s.onEvict, s.onDemote
	s.mu.Unlock()

	switch {
	case cancelled: // DeleteOwned returned it already
		removeFile(s.path(id))
	case err != nil:
		s.log.Warn("snapshot dropped: not demoted to disk", "id", id, "err", err)
		if onEvict != nil {
			onEvict(id)
		}
	default:
		s.demotions.Add(1)
		if onDemote != nil {
			onDemote(id)
		}
		s.trim(id)
	}
}

// OnDemote sets a function called with the id of every snapshot moved
// from RAM to disk, on the writer goroutine; the engine publishes the move.
func (s *Store) OnDemote(f func(id string)) { s.mu.Lock(); s.onDemote = f; s.mu.Unlock() }

// RAMBytes returns the bytes of snapshots held in RAM.
func (s *Store) RAMBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ramBytes
}

// Demotions returns how many snapshots moved from RAM to disk.
func (s *Store) Demotions() uint64 { return s.demotions.Load() }

// Where reports which medium holds snapshot id, and whether the store
// holds it at all (a save still queued is not held yet).
func (s *Store) Where(id string) (Medium, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil {
		return MediumDisk, false
	}
	if f.mem != nil {
		return MediumRAM, true
	}
	return MediumDisk, true
}

// Held lists the snapshots the store holds in medium m, sorted by id;
// tests scan both tiers with it.
func (s *Store) Held(m Medium) []SavedSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SavedSnapshot
	for id, f := range s.files {
		if (f.mem != nil) == (m == MediumRAM) {
			out = append(out, SavedSnapshot{ID: id, Owner: f.owner, Bytes: f.bytes, Medium: m})
		}
	}
	slices.SortFunc(out, func(a, b SavedSnapshot) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// writeFile writes image as id's file, completely or not at all
// (invariant 1), with used as its last use.
func (s *Store) writeFile(id string, image []byte, used time.Time) error {
	tmp, err := s.createTemp(s.cfg.Dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(image)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), time.Time{}, used) // the last use, read back at restart
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path(id))
	}
	return err
}
