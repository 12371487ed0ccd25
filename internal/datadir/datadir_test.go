package datadir

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestMkdirPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	if err := MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v under umask 022, want 0700", fi.Mode().Perm())
	}
	// A directory that exists keeps its mode.
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MkdirPrivate(open); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(open); fi.Mode().Perm() != 0o755 {
		t.Errorf("an existing directory became %v, want 0755 kept", fi.Mode().Perm())
	}
}

func TestSweepInterval(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{720 * time.Hour, time.Hour},
		{2 * time.Hour, 30 * time.Minute},
		{time.Second, time.Second},
		{time.Millisecond, time.Second},
	} {
		if got := SweepInterval(tc.ttl); got != tc.want {
			t.Errorf("SweepInterval(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

// TestSweepStops checks that Sweep returns once stop is closed, having
// swept on its ticks before.
func TestSweepStops(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	var n atomic.Int32
	swept := make(chan struct{}, 1)
	go func() {
		defer close(done)
		Sweep(stop, time.Millisecond, func() { // ticks every second
			n.Add(1)
			select {
			case swept <- struct{}{}:
			default:
			}
		})
	}()
	<-swept
	close(stop)
	<-done
	if n.Load() < 1 {
		t.Fatal("no sweep before stop")
	}
}
