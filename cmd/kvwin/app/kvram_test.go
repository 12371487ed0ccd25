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
