package kvcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kvwin/internal/datadir"
)

// Expiry of snapshots: a snapshot holds a conversation's token ids, so an
// operator who promises to keep a conversation no longer than a TTL needs
// its snapshots gone as well. A snapshot's age is the time since its last
// use (saved, restored, or found already saved), kept in the file's
// modification time (see store.go, invariant 5).

// Expire deletes the snapshots not used since Now() - TTL, tells the OnEvict
// function of each, and returns their ids (sorted). With no TTL it does
// nothing. A snapshot with a save queued or being written is kept: it is
// being used. It blocks on file removal; safe for concurrent use. OpenStore
// and a background loop call it; it is exported for tests.
func (s *Store) Expire() []string {
	if s.cfg.TTL <= 0 {
		return nil
	}
	cutoff := s.cfg.Now().Add(-s.cfg.TTL)
	s.mu.Lock()
	var gone []string
	for id, f := range s.files {
		if f.used.Before(cutoff) && s.pending[id] == nil {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	// The files are removed under the lock: a save of the same id cannot
	// start (Save checks pending under it), so a new file is never removed
	// for an old one's age.
	for _, id := range gone {
		s.unindex(id)
		if err := removeFile(s.path(id)); err != nil {
			s.log.Warn("expired snapshot not removed", "id", id, "err", err)
		}
	}
	onEvict := s.onEvict
	s.mu.Unlock()
	if len(gone) > 0 {
		s.log.Info("snapshots expired", "count", len(gone), "ttl", s.cfg.TTL)
	}
	if onEvict != nil {
		for _, id := range gone {
			onEvict(id)
		}
	}
	return gone
}

// ExpireInterval is how often snapshots with ttl are swept
// (datadir.SweepInterval): every quarter TTL, at least hourly (a snapshot
// outlives its TTL by at most that), and at most every second. The memory
// store sweeps its conversations alike.
func ExpireInterval(ttl time.Duration) time.Duration {
	return datadir.SweepInterval(ttl)
}

// expireLoop runs Expire every ExpireInterval until Close.
func (s *Store) expireLoop() {
	defer s.wg.Done()
	datadir.Sweep(s.stop, s.cfg.TTL, func() { s.Expire() })
}

// ExpireDir deletes the snapshot files in dir last used before cutoff (a
// file's modification time is its last use) and returns how many. It is
// for a directory whose Store is not open, such as a model not loaded: an
// open Store expires its own files with Expire, and ExpireDir under it
// would leave its index offering files that are gone (a restore of one
// then falls back to a prefill). A missing dir holds nothing.
func ExpireDir(dir string, cutoff time.Time) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kvcache: expire snapshots in %s: %w", dir, err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), snapExt) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue // gone meanwhile, or used within the TTL
		}
		if err := removeFile(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// removeFile removes a file; one already gone is not an error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// DeleteOwnedDir deletes the snapshot files in dir owned by owner (a
// deleted conversation) and returns how many. Like ExpireDir it is for a
// directory whose Store is not open (a model not loaded); an open Store
// deletes with DeleteOwned. A file whose header cannot be read is left to
// the Store that opens the directory (it deletes bad files). A missing dir
// holds nothing.
func DeleteOwnedDir(dir string, owner Owner) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kvcache: delete snapshots in %s: %w", dir, err)
	}
	want := encodeOwner(owner)
	n := 0
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), snapExt) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		got, err := readOwner(p)
		if err != nil || !bytes.Equal(got, want) {
			continue
		}
		if err := removeFile(p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// readOwner reads the owner field of the snapshot file at p.
func readOwner(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hb := make([]byte, snapHeader)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, err
	}
	h, err := parseHead(hb)
	if err != nil {
		return nil, err
	}
	ob := make([]byte, int(h.owner))
	if _, err := io.ReadFull(f, ob); err != nil {
		return nil, err
	}
	return ob, nil
}
