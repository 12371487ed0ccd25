package memory

// The store is an append-only log of evicted turns in one SQLite file; the
// search runs over in-memory indexes loaded from it on first use.
//
// Invariants:
//   - A conversation is (tenant, name). Its turns form a tree: a turn is
//     filed under its chain (Link of its parent chain, role and text), and
//     is unique by (position, chain). Two histories that disagree at some
//     position are two branches, both kept; neither ever changes the other
//     (no first writer wins). A turn resent is stored once.
//   - A search sees only the turns on the asking history's own chain, of
//     its own (tenant, name): what it may get back is what that history
//     itself said. Derived state (indexes, BM25 statistics, fact analysis)
//     is built per branch, never shared across branches or conversations.
//   - A turn is acknowledged (Ingest returned nil) only after its
//     transaction committed to the WAL with synchronous=FULL: a kill -9, or
//     a power cut, after that cannot lose it.
//   - One process owns the file at a time (an exclusive lock on a sidecar
//     file); a second gets ErrLocked at Open instead of racing the first.
//   - With a TTL, a conversation not used (ingest or search) for TTL is
//     deleted: at Open and then every TTL/4 (at least every hour) by a
//     goroutine that Close stops.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"kvwin/engine/datadir"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Dir is the data directory; the store is Dir/File. Required.
	Dir string
	// File is the database file name; default "memory.db".
	File string
	// Conversations bounds the conversations whose indexes are kept in
	// memory; default 64. Others are reloaded from the file on use.
	Conversations int
	// BusyTimeout is how long a write waits for a lock; default 2s.
	BusyTimeout time.Duration
	// TTL expires a conversation not used (ingested into or searched) for
	// that long; 0 keeps conversations until deleted.
	TTL time.Duration
	// Now stamps ingested turns and uses; default time.Now.
	Now func() time.Time
	// Expired, if set, is called with each conversation the TTL deleted,
	// after its turns are gone and outside the store's locks, so state
	// kept elsewhere for it (KV snapshots) can go too. It may block; the
	// expiry waits for it.
	Expired func(Key)

	readOnly bool // open with mode=ro (tests of the read-only path)
}

// Store is the durable memory of named conversations. Safe for concurrent
// use; its methods block on disk.
type Store struct {
	cfg  StoreConfig
	path string
	db   *sql.DB
	lock *os.File

	mu     sync.Mutex
	closed bool
	convs  *lru[Key, *convState]
	resp   respCache // stored responses' chains (responses.go)

	// wmu makes this process's writes one at a time. SQLite allows one
	// writer; two of our pooled connections writing at once would make one
	// wait on busy_timeout, or fail at once with SQLITE_BUSY when a
	// transaction that read first must upgrade to write. It is always the
	// innermost lock (taken under a conversation's, never the reverse).
	wmu sync.Mutex

	failures atomic.Int64 // Ingest and Search calls that failed (see count)

	stop chan struct{}  // closed by Close: ends the expiry loop
	done sync.WaitGroup // the expiry loop
}

// schemaVersion is the PRAGMA user_version of the current schema. Version 1
// (no user_version) filed turns by position alone, first writer winning;
// its turns cannot be placed on a chain, so migrating keeps them in
// turns_v1, never served, and deleted with their conversation. Version 3
// added the stored responses (responses.go).
const schemaVersion = 3

const schema = `
CREATE TABLE IF NOT EXISTS conversations (
	id     INTEGER PRIMARY KEY,
	tenant TEXT NOT NULL,
	name   TEXT NOT NULL,
	used   INTEGER NOT NULL DEFAULT 0,
	UNIQUE (tenant, name)
);
CREATE TABLE IF NOT EXISTS turns (
	id     INTEGER PRIMARY KEY,
	conv   INTEGER NOT NULL REFERENCES conversations (id),
	pos    INTEGER NOT NULL,
	chain  INTEGER NOT NULL,
	parent INTEGER NOT NULL,
	role   TEXT NOT NULL,
	text   TEXT NOT NULL,
	handle TEXT NOT NULL,
	at     INTEGER NOT NULL,
	UNIQUE (conv, pos, chain)
);
CREATE INDEX IF NOT EXISTS conversations_used ON conversations (used);`

// Open opens (creating if needed) the store under cfg.Dir. Errors wrap
// ErrLocked, ErrReadOnly or ErrCorrupt where they apply.
func Open(cfg StoreConfig) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("memory store: no data dir")
	}
	if cfg.File == "" {
		cfg.File = "memory.db"
	}
	if cfg.Conversations <= 0 {
		cfg.Conversations = 64
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	path := filepath.Join(cfg.Dir, cfg.File)
	if err := datadir.MkdirPrivate(cfg.Dir); err != nil {
		return nil, classify(path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o222 == 0 {
		// Root may write anyway; the operator marked it read-only, so honour that.
		return nil, fmt.Errorf("memory store %s: %w: file mode %v", path, ErrReadOnly, fi.Mode().Perm())
	}
	if !cfg.readOnly {
		if err := privateFiles(path); err != nil {
			return nil, classify(path, err)
		}
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, classify(path, err)
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("memory store %s: ttl %v must not be negative", path, cfg.TTL)
	}
	s := &Store{cfg: cfg, path: path, lock: lock, convs: newLRU[Key, *convState](cfg.Conversations), stop: make(chan struct{})}
	if err := s.open(); err != nil {
		_ = s.Close()
		return nil, err
	}
	if cfg.TTL > 0 && !cfg.readOnly {
		if _, err := s.Expire(context.Background()); err != nil {
			_ = s.Close()
			return nil, err
		}
		s.done.Add(1)
		go s.expireLoop()
	}
	return s, nil
}

func (s *Store) open() error {
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)",
		s.path, s.cfg.BusyTimeout.Milliseconds())
	if s.cfg.readOnly {
		dsn = fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(%d)", s.path, s.cfg.BusyTimeout.Milliseconds())
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return classify(s.path, err)
	}
	db.SetMaxOpenConns(4)
	s.db = db
	var check string
	if err := db.QueryRow(`PRAGMA quick_check`).Scan(&check); err != nil {
		return classify(s.path, err)
	}
	if check != "ok" {
		return fmt.Errorf("memory store %s: %w: quick_check: %s", s.path, ErrCorrupt, check)
	}
	if s.cfg.readOnly {
		return nil
	}
	return classify(s.path, s.migrate())
}

// migrate brings the file to schemaVersion in one transaction.
func (s *Store) migrate() (err error) {
	var version int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	if version == schemaVersion {
		return nil
	}
	if version > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this kvwin's %d", version, schemaVersion)
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'turns'`).Scan(&n); err != nil {
		return err
	}
	if version == 0 && n > 0 { // version 1 (no user_version); version 2 only gains tables
		for _, q := range []string{
			`ALTER TABLE turns RENAME TO turns_v1`,
			`DROP TABLE IF EXISTS turns_fts`,
			`ALTER TABLE conversations ADD COLUMN used INTEGER NOT NULL DEFAULT 0`,
		} {
			if _, err := tx.Exec(q); err != nil {
				return fmt.Errorf("migrate to version %d: %w", schemaVersion, err)
			}
		}
	}
	if _, err := tx.Exec(schema + responsesSchema); err != nil {
		return err
	}
	if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// privateFiles makes the database file, created empty if missing, and its
// -wal and -shm files (SQLite creates them with the database's mode)
// readable by kvwin's user only: they hold conversations' text. An older
// kvwin created them 0644; they are tightened too.
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// lockFile takes an exclusive, non-blocking lock on path. The kernel drops
// it when the process dies, so a kill -9 never leaves the store locked.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another process holds %s", ErrLocked, path)
		}
		return nil, err
	}
	return f, nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the file and releases the lock. Safe to call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.db != nil {
		err = s.db.Close()
	}
	if s.lock != nil {
		_ = s.lock.Close()
	}
	return err
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// convID returns the id of key's conversation, creating it if create is set;
// 0 if it does not exist.
func (s *Store) convID(ctx context.Context, key Key, create bool) (int64, error) {
	if create {
		s.wmu.Lock()
		_, err := s.db.ExecContext(ctx, `INSERT INTO conversations (tenant, name, used) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
			key.Tenant, key.Conversation, s.cfg.Now().UnixNano())
		s.wmu.Unlock()
		if err != nil {
			return 0, classify(s.path, err)
		}
	}
	var id int64
	err := s.db.QueryRowContext(ctx, `SELECT id FROM conversations WHERE tenant = ? AND name = ?`, key.Tenant, key.Conversation).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id, classify(s.path, err)
}
