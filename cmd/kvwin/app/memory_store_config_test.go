package app

import (
	"path/filepath"
	"testing"
	"time"

	"kvwin/window/memory"
)

// --memory-store picks the store: PostgreSQL by scheme, else a SQLite file;
// anything else is refused before serving. --memory-store-timeout goes to
// a PostgreSQL store; a negative one is refused.
func TestMemoryStoreLocation(t *testing.T) {
	tests := []struct {
		loc     string
		timeout time.Duration
		want    memory.StoreConfig
		bad     bool
	}{
		{"", 0, memory.StoreConfig{Dir: filepath.Join("/data", "memory")}, false},
		{"postgres://kvwin@db/kvwin", 0, memory.StoreConfig{URL: "postgres://kvwin@db/kvwin"}, false},
		{"postgresql://db/kvwin?sslmode=require", 0, memory.StoreConfig{URL: "postgresql://db/kvwin?sslmode=require"}, false},
		{"/var/lib/kvwin/mem.db", 0, memory.StoreConfig{Dir: "/var/lib/kvwin", File: "mem.db"}, false},
		{"sqlite:/var/lib/kvwin/mem.db", 0, memory.StoreConfig{Dir: "/var/lib/kvwin", File: "mem.db"}, false},
		{"mysql://db/kvwin", 0, memory.StoreConfig{}, true},
		{"sqlite:", 0, memory.StoreConfig{}, true},
		{"/var/lib/kvwin/", 0, memory.StoreConfig{}, true},
		{"postgres://kvwin@db/kvwin", 2 * time.Second, memory.StoreConfig{URL: "postgres://kvwin@db/kvwin", Timeout: 2 * time.Second}, false},
		{"postgres://kvwin@db/kvwin", -time.Second, memory.StoreConfig{}, true},
	}
	for _, tc := range tests {
		err := checkMemoryStore(tc.loc, tc.timeout)
		if (err != nil) != tc.bad {
			t.Errorf("checkMemoryStore(%q) = %v, want bad %v", tc.loc, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		got := storeConfig(Config{DataDir: "/data", MemoryStore: tc.loc, MemoryStoreTimeout: tc.timeout})
		if got.URL != tc.want.URL || got.Dir != tc.want.Dir || got.File != tc.want.File || got.Timeout != tc.want.Timeout {
			t.Errorf("storeConfig(%q) = %+v, want %+v", tc.loc, got, tc.want)
		}
	}
}
