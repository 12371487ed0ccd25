// Package pgtest gives tests the PostgreSQL server .ci/run starts (see
// .ci/postgres): its URL is in KVWIN_TEST_POSTGRES_DSN. A test that needs
// it skips when the variable is unset, unless CI is set: then it fails, so
// CI never passes by skipping.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// EnvDSN names the variable holding the test server's URL.
const EnvDSN = "KVWIN_TEST_POSTGRES_DSN"

// DSN returns the test server's URL; it skips t when there is none
// outside CI and fails it inside.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is unset with CI set: .ci/run starts a PostgreSQL server for this test", EnvDSN)
		}
		t.Skipf("%s is unset: no PostgreSQL server to test against (.ci/postgres start DIR prints one)", EnvDSN)
	}
	return dsn
}

// Schema returns a URL of the test server whose connections use a fresh,
// empty schema of their own (search_path), dropped when t ends: each test
// gets its own tables, and tests may run in parallel on one server.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	db := Open(t, dsn)
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP SCHEMA ` + name + ` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// Open returns a database/sql handle on dsn (a URL Schema returned, say),
// closed when t ends: for a test to count rows or break things.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", EnvDSN, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
