package memory

import (
	"errors"
	"fmt"
	"io/fs"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

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
	switch {
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
