// Package datadir holds what the stores under --data-dir (the KV snapshots
// of kvcache, the conversations of window/memory) do alike with what they
// keep on disk: make their directory private, and sweep what outlived its
// TTL on one cadence. A leaf: it imports no kvwin package. See
// docs/architecture.md.
package datadir

import (
	"os"
	"time"
)

// MkdirPrivate creates dir and its missing parents, readable by kvwin's
// user only (0700) whatever the umask: what is under --data-dir holds
// conversations. A directory that exists keeps its mode.
func MkdirPrivate(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// SweepInterval is how often what is kept for ttl is swept: every quarter
// TTL, at least hourly (a thing outlives its TTL by at most that), and at
// most every second.
func SweepInterval(ttl time.Duration) time.Duration {
	return max(min(ttl/4, time.Hour), time.Second)
}

// Sweep calls sweep every SweepInterval(ttl) until stop is closed, on the
// calling goroutine: the store that starts it owns it and closes stop.
func Sweep(stop <-chan struct{}, ttl time.Duration, sweep func()) {
	tick := time.NewTicker(SweepInterval(ttl))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			sweep()
		}
	}
}
