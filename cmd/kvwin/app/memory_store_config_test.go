package app

import (
	"path/filepath"
	"testing"

	"kvwin/window/memory"
)

// --memory-store picks the store: PostgreSQL by scheme, else a SQLite file;
// anything else is refused before serving.
func TestMemoryStoreLocation(t *testing.T) {
	tests := []struct {
		loc  string
		want memory.StoreConfig
		bad  bool
	}{
		{"", memory.StoreConfig{Dir: filepath.Join("/data", "memory")}, false},
		{"postgres://kvwin@db/kvwin", memory.StoreConfig{URL: "postgres://kvwin@db/kvwin"}, false},
		{"postgresql://db/kvwin?sslmode=require", memory.StoreConfig{URL: "postgresql://db/kvwin?sslmode=require"}, false},
		{"/var/lib/kvwin/mem.db", memory.StoreConfig{Dir: "/var/lib/kvwin", File: "mem.db"}, false},
		{"sqlite:/var/lib/kvwin/mem.db", memory.StoreConfig{Dir: "/var/lib/kvwin", File: "mem.db"}, false},
		{"mysql://db/kvwin", memory.StoreConfig{}, true},
		{"sqlite:", memory.StoreConfig{}, true},
		{"/var/lib/kvwin/", memory.StoreConfig{}, true},
	}
	for _, tc := range tests {
		err := checkMemoryStore(tc.loc)
		if (err != nil) != tc.bad {
			t.Errorf("checkMemoryStore(%q) = %v, want bad %v", tc.loc, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		got := storeConfig(Config{DataDir: "/data", MemoryStore: tc.loc})
		if got.URL != tc.want.URL || got.Dir != tc.want.Dir || got.File != tc.want.File {
			t.Errorf("storeConfig(%q) = %+v, want %+v", tc.loc, got, tc.want)
		}
	}
}
