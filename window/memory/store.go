package memory

// The store is an append-only log of evicted turns in one SQLite file, or
// in a PostgreSQL database several gateway replicas share; the search runs
// over in-memory indexes loaded from it on first use.
//
// Invariants:
//   - A conversation is (tenant, name). Its turns form a tree: a turn is
//     filed under its chain (Link of its parent chain, role and text), and
//     is unique by (position, chain). Two histories that disagree at some
//     position are two branches, both kept; neither ever changes the other
//     (no first writer wins). A turn resent is stored once, whichever
//     replica sends it, alternately or at the same time (the unique key
//     and ON CONFLICT DO NOTHING).
//   - A search sees only the turns on the asking history's own chain, of
//     its own (tenant, name): what it may get back is what that history
//     itself said. Derived state (indexes, BM25 statistics, fact analysis)
//     is built per branch, never shared across branches or conversations.
//   - A turn is acknowledged (Ingest returned nil) only after its
//     transaction committed (SQLite: to the WAL with synchronous=FULL): a
//     kill -9, or a power cut, after that cannot lose it.
//   - SQLite: one process owns the file at a time (an exclusive lock on a
//     sidecar file); a second gets ErrLocked at Open instead of racing the
//     first. PostgreSQL: every write to a conversation bumps its row's rev
//     in the same transaction, and every use compares the row's (id, rev)
//     with what this process holds: a conversation another replica deleted
//     is looked up anew, one it extended has its branches extended from
//     the database before the search.
//   - With a TTL, a conversation not used (ingest or search) for TTL is
//     deleted: at Open and then every TTL/4 (at least every hour) by a
//     goroutine that Close stops.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"kvwin/internal/lru"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"kvwin/internal/datadir"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// URL, if set, is a PostgreSQL database (postgres://… or
	// postgresql://…) the store shares with other processes; Dir and File
	// are then unused.
	URL string
	// Dir is the data directory; the store is Dir/File. Required without
	// URL.
	Dir string
	// File is the database file name; default "memory.db".
	File string
	// HeldBytes bounds the memory the conversations' branch indexes hold
	// (Index.Bytes), least recently used dropped first; default
	// DefaultHeldBytes. A dropped conversation is read from the file again
	// when used; one larger than the bound is held alone.
	HeldBytes int64
	// ResponseBytes bounds the stored responses' messages held in memory
	// to rebuild chains (respCache), by their bytes, least recently used
	// conversation dropped first; default DefaultResponseBytes.
	ResponseBytes int64
	// BusyTimeout is how long a write waits for a lock; default 2s.
	BusyTimeout time.Duration
	// TTL expires a conversation not used (ingested into or searched) for
	// that long; 0 keeps conversations until deleted.
	TTL time.Duration
	// Timeout bounds each call (deadline.go); default DefaultTimeout.
	Timeout time.Duration
	// Now stamps ingested turns and uses; default time.Now.
	Now func() time.Time
	// Expired, if set, is called with each conversation the TTL deleted,
	// after its turns are gone and outside the store's locks, so state
	// kept elsewhere for it (KV snapshots) can go too. It may block; the
	// expiry waits for it.
	Expired func(Key)

	readOnly    bool   // open with mode=ro (tests of the read-only path)
	reconnected func() // called when the reconnect loop cleared a fault (tests)
	wentDown    func() // called when the store is marked down (tests)
}

// DefaultHeldBytes is StoreConfig.HeldBytes's default, 256 MiB. The
// rule: the largest conversation an open issue tests is held whole, 100,000
// stored short turns (about 200 MB of index by Index.Bytes' estimate of
// 2 KB a 40-byte turn), as are a 2,000-turn chain's 4,000 items; beyond
// that it is a bound on what a server's memory keeps, not on conversations.
const DefaultHeldBytes = 256 << 20

// DefaultResponseBytes is StoreConfig.ResponseBytes's default, 64 MiB. The
// rule: a 2,000-turn Responses chain's messages (4,000 items, a few MB at
// a kilobyte or two each) and a few dozen more like it fit.
const DefaultResponseBytes = 64 << 20

// Store is the durable memory of named conversations. Safe for concurrent
// use; its methods block on disk.
type Store struct {
	cfg  StoreConfig
	d    *dialect
	path string // the file, or the database's URL without its password
	db   *sql.DB
	lock *os.File // SQLite only

	fmu   sync.Mutex
	fault error // PostgreSQL: why the database cannot be used now (see health.go)
	ready bool  // the schema is migrated
	// epoch ends (endEpoch) when the store is marked down, ending the
	// calls waiting on the database then (deadline.go); nil for SQLite.
	epoch    context.Context
	endEpoch context.CancelFunc

	mu     sync.Mutex
	closed bool
	convs  *lru.Map[Key, *convState]
	resp   respCache // stored responses' chains (responses.go)

	// wmu makes this process's writes one at a time (SQLite; see
	// writeLock). SQLite allows one
	// writer; two of our pooled connections writing at once would make one
	// wait on busy_timeout, or fail at once with SQLITE_BUSY when a
	// transaction that read first must upgrade to write. It is always the
	// innermost lock (taken under a conversation's, never the reverse).
	wmu sync.Mutex

	failures atomic.Int64 // Ingest and Search calls that failed (see count)
	unstored atomic.Int64 // turns of failed Ingest calls

	stop chan struct{}  // closed by Close: ends the expiry and reconnect loops
	done sync.WaitGroup // those loops
}

// Open opens the store: the PostgreSQL database of cfg.URL, or the SQLite
// file under cfg.Dir (created if needed). Errors wrap ErrLocked,
// ErrReadOnly or ErrCorrupt where they apply. A PostgreSQL database that
// cannot be reached is no error: the store opens degraded (Health says
// why), its calls fail with ErrUnavailable, and it connects and migrates
// when the database answers.
func Open(cfg StoreConfig) (*Store, error) {
	if cfg.HeldBytes <= 0 {
		cfg.HeldBytes = DefaultHeldBytes
	}
	if cfg.ResponseBytes <= 0 {
		cfg.ResponseBytes = DefaultResponseBytes
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("memory store: ttl %v must not be negative", cfg.TTL)
	}
	if err := cfg.timeout(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, convs: lru.New[Key, *convState](cfg.HeldBytes, convBytes), stop: make(chan struct{})}
	s.resp.max = cfg.ResponseBytes
	var err error
	if cfg.URL != "" {
		err = s.openShared()
	} else {
		err = s.openFile()
	}
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	if cfg.TTL > 0 && !cfg.readOnly {
		if s.usable() == nil {
			if _, err := s.Expire(context.Background()); err != nil && !errors.Is(err, ErrUnavailable) {
				_ = s.Close()
				return nil, err
			}
		}
		s.done.Add(1)
		go s.expireLoop()
	}
	return s, nil
}

// openFile opens the SQLite file under cfg.Dir, which this process then
// owns.
func (s *Store) openFile() error {
	cfg := &s.cfg
	if cfg.Dir == "" {
		return errors.New("memory store: no data dir")
	}
	if cfg.File == "" {
		cfg.File = "memory.db"
	}
	s.d, s.ready = sqliteDialect, true
	path := filepath.Join(cfg.Dir, cfg.File)
	s.path = path
	if err := datadir.MkdirPrivate(cfg.Dir); err != nil {
		return classify(path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o222 == 0 {
		// Root may write anyway; the operator marked it read-only, so honour that.
		return fmt.Errorf("memory store %s: %w: file mode %v", path, ErrReadOnly, fi.Mode().Perm())
	}
	if !cfg.readOnly {
		if err := privateFiles(path); err != nil {
			return classify(path, err)
		}
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return classify(path, err)
	}
	s.lock = lock
	return s.open()
}

func (s *Store) open() error {
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)",
		s.path, s.cfg.BusyTimeout.Milliseconds())
	if s.cfg.readOnly {
		dsn = fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(%d)", s.path, s.cfg.BusyTimeout.Milliseconds())
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return s.classify(err)
	}
	db.SetMaxOpenConns(4)
	s.db = db
	var check string
	if err := db.QueryRow(`PRAGMA quick_check`).Scan(&check); err != nil {
		return s.classify(err)
	}
	if check != "ok" {
		return fmt.Errorf("memory store %s: %w: quick_check: %s", s.path, ErrCorrupt, check)
	}
	if s.cfg.readOnly {
		return nil
	}
	return s.classify(s.d.migrate(context.Background(), s.db))
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

// Path returns the database file's path, or the PostgreSQL URL without
// its password.
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

// convID returns the id and rev of key's conversation, creating it if
// create is set; id 0 if it does not exist.
func (s *Store) convID(ctx context.Context, key Key, create bool) (id, rev int64, err error) {
	if create {
		unlock := s.writeLock()
		_, err := s.db.ExecContext(ctx, s.d.rebind(`INSERT INTO conversations (tenant, name, used) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`),
			key.Tenant, key.Conversation, s.cfg.Now().UnixNano())
		unlock()
		if err != nil {
			return 0, 0, s.classify(err)
		}
	}
	err = s.db.QueryRowContext(ctx, s.d.rebind(`SELECT id, rev FROM conversations WHERE tenant = ? AND name = ?`), key.Tenant, key.Conversation).Scan(&id, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	return id, rev, s.classify(err)
}

// writeLock takes this process's write lock where the database has one
// writer (SQLite) and returns its release; a no-op for PostgreSQL, whose
// row locks order writers.
func (s *Store) writeLock() func() {
	if s.d.shared {
		return func() {}
	}
	s.wmu.Lock()
	return s.wmu.Unlock
}
