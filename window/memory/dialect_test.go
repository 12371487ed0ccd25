package memory

import (
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	tests := []struct {
		d       *dialect
		in, out string
	}{
		{sqliteDialect, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = ? AND c = ?`},
		{postgresDialect, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{postgresDialect, `SELECT '?' FROM t WHERE b = ?`, `SELECT '?' FROM t WHERE b = $1`},
		{postgresDialect, `SELECT 1`, `SELECT 1`},
	}
	for _, tc := range tests {
		if got := tc.d.rebind(tc.in); got != tc.out {
			t.Errorf("%s rebind(%q) = %q, want %q", tc.d.name, tc.in, got, tc.out)
		}
	}
}

// The store's URL in logs and errors never carries the password.
func TestRedact(t *testing.T) {
	for _, dsn := range []string{
		"postgres://kvwin:s3cret@db:5432/kvwin?sslmode=require",
		"postgresql://db/kvwin?user=kvwin&password=s3cret",
		"postgres://kvwin:s3cret@[::1", // unparsable
	} {
		if got := redact(dsn); strings.Contains(got, "s3cret") {
			t.Errorf("redact(%q) = %q", dsn, got)
		}
	}
	if _, err := Open(StoreConfig{URL: "postgres://kvwin:s3cret@db:notaport/kvwin"}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open of an invalid URL: %v", err)
	}
}

func TestIsPostgres(t *testing.T) {
	for loc, want := range map[string]bool{
		"postgres://h/db": true, "postgresql://h/db": true, "POSTGRES://h/db": true,
		"/var/lib/kvwin/memory.db": false, "sqlite:/x.db": false, "mysql://h/db": false,
	} {
		if got := IsPostgres(loc); got != want {
			t.Errorf("IsPostgres(%q) = %v", loc, got)
		}
	}
}
