package app

import (
	"strings"
	"testing"
)

func TestDefaultKVRAM(t *testing.T) {
	for _, tc := range []struct {
		name, meminfo string
		want          int64
	}{
		{"an eighth", "MemTotal:  16384 kB\nMemAvailable:    8192 kB\n", 1024 * 1024},
		{"capped", "MemAvailable: 268435456 kB\n", maxDefaultKVRAM},
		{"not said", "MemTotal: 100 kB\n", 0},
		{"unreadable", "MemAvailable: lots\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := defaultKVRAM(strings.NewReader(tc.meminfo)); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
	if got := kvRAMBytes(12345); got != 12345 {
		t.Fatalf("--kv-ram 12345 gave %d", got)
	}
}

func TestDefaultKVDisk(t *testing.T) {
	for _, tc := range []struct {
		name       string
		free, want int64
	}{
		{"an eighth", 64 << 30, 8 << 30},
		{"at least the old budget", 2 << 30, minDefaultKVDisk},
		{"capped", 4 << 40, maxDefaultKVDisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := defaultKVDisk(tc.free); got != tc.want {
				t.Fatalf("free %d: got %d, want %d", tc.free, got, tc.want)
			}
		})
	}
	if got := kvDiskBytes(12345, t.TempDir()); got != 12345 {
		t.Fatalf("--snapshot-max-bytes 12345 gave %d", got)
	}
	// A data directory not made yet is measured on its nearest parent.
	free, ok := freeBytes(t.TempDir())
	if !ok || free <= 0 {
		t.Fatalf("free space of a temporary directory: %d, %v", free, ok)
	}
	if got, want := kvDiskBytes(-1, t.TempDir()+"/not/yet"), defaultKVDisk(free); got < minDefaultKVDisk || got > maxDefaultKVDisk || got > want+want/8 || got < want-want/8 {
		t.Fatalf("default for a directory not made yet: %d, want about %d", got, want)
	}
}
