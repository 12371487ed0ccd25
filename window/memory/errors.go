package memory

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// driverBadConn is database/sql's sign of a connection that broke.
var driverBadConn = driver.ErrBadConn

// Store failures a caller can log and degrade from (serve the request from
// its own turns). Each is wrapped with the file's path and the cause.
var (
	// ErrLocked: another process holds the store (two servers on one data
	// dir), or SQLite stayed busy past the timeout.
	ErrLocked = errors.New("memory store is locked")
	// ErrReadOnly: the file or its directory cannot be written.
	ErrReadOnly = errors.New("memory store is read-only")
	// ErrCorrupt: the file is not a SQLite database or fails its check.
	ErrCorrupt = errors.New("memory store is corrupt")
	// ErrUnavailable: the store's PostgreSQL database cannot be reached
	// (down, refusing connections, out of connections, or refusing the
	// credentials) or is shutting down. The store retries it.
	ErrUnavailable = errors.New("memory store is unavailable")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("memory store is closed")
)

// classify wraps err with the store error it amounts to, if any.
func classify(path string, err error) error {
	if err == nil {
		return nil
	}
	var kind error
	var se *sqlite.Error
	var pe *pgconn.PgError
	var ne net.Error
	var ce *pgconn.ConnectError
	switch {
	case errors.Is(err, errNoAnswer):
		kind = ErrTimeout
	case errors.As(err, &pe):
		kind = postgresKind(pe.Code)
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.SafeToRetry(err), errors.Is(err, driverBadConn),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF): // the connection broke mid-statement
		kind = ErrUnavailable
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			kind = ErrLocked
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN:
			kind = ErrReadOnly
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			kind = ErrCorrupt
		}
	case errors.Is(err, fs.ErrPermission):
		kind = ErrReadOnly
	}
	if kind == nil || errors.Is(err, kind) {
		return fmt.Errorf("memory store %s: %w", path, err)
	}
	return fmt.Errorf("memory store %s: %w: %w", path, kind, err)
}

// postgresKind is the store error a PostgreSQL SQLSTATE amounts to.
func postgresKind(code string) error {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"),  // insufficient resources (too many connections)
		strings.HasPrefix(code, "57P"), // operator intervention: shutdown, cannot connect now
		strings.HasPrefix(code, "28"):  // invalid authorization
		return ErrUnavailable
	case code == "25006", code == "42501": // read-only transaction, insufficient privilege
		return ErrReadOnly
	case code == "40001", code == "40P01", code == "55P03": // serialization, deadlock, lock not available
		return ErrLocked
	case code == "XX001", code == "XX002": // data corrupted, index corrupted
		return ErrCorrupt
	}
	return nil
}
