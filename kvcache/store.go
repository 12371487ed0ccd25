package kvcache

// The snapshot store: KV state of sequences saved to disk when the engine
// gives their slot to another conversation, so a returning conversation is
// restored instead of prefilled.
//
// Invariants:
//
//  1. A file in the directory is either complete or absent: it is written to
//     a temporary name, synced and renamed.
//  2. A snapshot is used only after its header, length, model fingerprint and
//     checksum verify; one that fails is deleted and reported, never used. A
//     wrong answer from a bad file is impossible; a prefill is the fallback.
//  3. s.bytes is the sum of the sizes of the files on disk, and after every
//     save it is at most MaxBytes (least recently used files go first).
//     With RAMBytes set, a save is kept in RAM first and demoted to disk
//     when the RAM budget needs room: see ram.go for that tier's rules.
//  4. Saves are compressed and written by one goroutine, off the engine's
//     decode path, from a bounded queue; a full queue drops the save.
//  5. A file's modification time is its last use (saved, restored, or found
//     already saved when its slot was given away), so the age survives a
//     restart: a save stamps it, a use touches it. With a TTL, a file not
//     used for TTL is deleted: at open and then every TTL/4 (at least every
//     hour) by a goroutine that Close stops. The snapshot holds the
//     conversation's token ids, so this is a data-retention bound, not only
//     a cache policy.
//
// File layout (little-endian):
//
//	magic "KVWSNAP2" | fingerprint u64 | tokens u32 | state bytes u64 |
//	compressed bytes u64 | checksum u64 | owner bytes u32 |
//	owner (tenant NUL conversation) | tokens × i32 | zstd(state)
//
// Every snapshot has an Owner: the tenant whose prompt it holds (a tenant
// never restores another tenant's KV, even on a key collision: the owner is
// compared on restore) and the conversation it came from, so deleting a
// conversation deletes its snapshots.
//
// The checksum is xxhash64 over the owner, the token ids and the uncompressed state. The
// token ids are stored whole (not only their block keys), so a restore is
// checked against the prompt token by token: a key collision can never
// restore the wrong KV.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"kvwin/internal/ident"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"kvwin/internal/datadir"
)

// Errors of the snapshot store.
var (
	ErrSnapshotCorrupt  = errors.New("snapshot corrupt")
	ErrSnapshotMismatch = errors.New("snapshot from another model")
	ErrSnapshotMissing  = errors.New("snapshot not found")
	// ErrSaveCancelled: the snapshot's conversation was deleted while its
	// save was queued or being written; nothing of it is on disk.
	ErrSaveCancelled = errors.New("snapshot save cancelled: its conversation was deleted")
)

const (
	snapMagic  = "KVWSNAP2"
	snapHeader = 8 + 8 + 4 + 8 + 8 + 8 + 4
	// maxOwner bounds the owner field, so a corrupt length cannot make a
	// reader allocate much.
	maxOwner = 1 << 12
	snapExt  = ".kvsnap"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	Dir         string // created if missing
	MaxBytes    int64  // disk budget; default 1 GiB
	Fingerprint uint64 // the model's identity; files with another are deleted
	Queue       int    // saves waiting to be written; default 4
	Log         *slog.Logger
	// TTL deletes a snapshot not used (saved or restored) for that long;
	// 0 keeps snapshots until the disk budget or a delete removes them.
	TTL time.Duration
	// Now is the clock of last uses and expiry; default time.Now. Tests
	// inject one.
	Now func() time.Time
	// RAMBytes is the RAM tier's budget (ram.go); 0 keeps snapshots on
	// disk only.
	RAMBytes int64
	// TenantShare is the largest share of RAMBytes one tenant's snapshots
	// may hold, in (0, 1]; 0 means DefaultTenantShare.
	TenantShare float64
}

// Owner is the (tenant, conversation) a prefix belongs to: the one
// identity type of kvwin (ident.Owner).
type Owner = ident.Owner

// encodeOwner is the owner as stored: tenant NUL conversation.
func encodeOwner(o Owner) []byte { return []byte(o.Tenant + "\x00" + o.Conversation) }

// decodeOwner parses an encoded owner.
func decodeOwner(b []byte) (Owner, error) {
	t, c, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return Owner{}, fmt.Errorf("%w: bad owner", ErrSnapshotCorrupt)
	}
	return Owner{Tenant: t, Conversation: c}, nil
}

// SavedSnapshot describes a snapshot on disk.
type SavedSnapshot struct {
	ID     string
	Owner  Owner
	Tokens []int
	Bytes  int64  // file size
	Medium Medium // where it is now
}

type saveJob struct {
	id     string
	owner  Owner
	tokens []int
	state  []byte
	done   func(SavedSnapshot, error)
}

type storeFile struct {
	owner  Owner
	tokens int // how many tokens it holds
	bytes  int64
	used   time.Time
	mem    []byte // the file's bytes while it is in the RAM tier; nil on disk
}

// Store keeps snapshots in a directory. It is safe for concurrent use.
type Store struct {
	cfg   StoreConfig
	log   *slog.Logger
	jobs  chan saveJob
	wg    sync.WaitGroup
	close sync.Once
	dec   *zstd.Decoder

	mu        sync.Mutex
	files     map[string]*storeFile
	bytes     int64            // on disk
	ramBytes  int64            // in RAM (ram.go, R1)
	tenantRAM map[string]int64 // in RAM, per tenant
	onEvict   func(id string)
	onDemote  func(id string)
	demotions atomic.Uint64
	pending   map[string]chan struct{} // saves queued or being written; closed when done
	queued    map[string]Owner         // the owner of each queued save
	// cancelled: queued saves whose owner was deleted (DeleteOwned); they
	// are not written, or removed if written meanwhile.
	cancelled map[string]bool

	stop chan struct{} // closed by Close: ends the expiry loop

	// createTemp opens the temporary file a save writes; tests replace it to
	// simulate a full disk.
	createTemp func(dir, pattern string) (*os.File, error)
}

// OpenStore opens (creating) the directory, indexes the snapshots already
// there and starts the writer. Files from another model, or whose header does
// not verify, are deleted. Existing lists what survived, for the registry.
func OpenStore(cfg StoreConfig) (*Store, []SavedSnapshot, error) {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.Queue == 0 {
		cfg.Queue = 4
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TenantShare == 0 {
		cfg.TenantShare = DefaultTenantShare
	}
	if cfg.Dir == "" || cfg.MaxBytes < 0 || cfg.Queue < 0 || cfg.TTL < 0 || cfg.RAMBytes < 0 || cfg.TenantShare < 0 || cfg.TenantShare > 1 {
		return nil, nil, fmt.Errorf("kvcache: snapshot store %+v: %w", cfg, ErrInvalidConfig)
	}
	if err := MkdirPrivate(cfg.Dir); err != nil {
		return nil, nil, fmt.Errorf("kvcache: snapshot dir: %w", err)
	}
	dec, err := newSnapshotDecoder()
	if err != nil {
		return nil, nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Log, jobs: make(chan saveJob, cfg.Queue), dec: dec,
		files: map[string]*storeFile{}, tenantRAM: map[string]int64{}, pending: map[string]chan struct{}{},
		queued: map[string]Owner{}, cancelled: map[string]bool{}, createTemp: os.CreateTemp,
		stop: make(chan struct{})}
	existing := s.index()
	if gone := s.Expire(); len(gone) > 0 {
		existing = slices.DeleteFunc(existing, func(e SavedSnapshot) bool { return slices.Contains(gone, e.ID) })
	}
	s.wg.Add(1)
	go s.writer()
	if cfg.TTL > 0 {
		s.wg.Add(1)
		go s.expireLoop()
	}
	return s, existing, nil
}

// MkdirPrivate creates dir and its missing parents, readable by kvwin's
// user only (0700) whatever the umask: what is under --data-dir (KV
// snapshots here, and the models beside them) holds conversations. A
// directory that exists keeps its mode. See datadir.MkdirPrivate.
func MkdirPrivate(dir string) error { return datadir.MkdirPrivate(dir) }

func (s *Store) path(id string) string { return filepath.Join(s.cfg.Dir, id+snapExt) }

// index reads the header and tokens of every file in the directory.
func (s *Store) index() []SavedSnapshot {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		s.log.Warn("snapshot dir unreadable; starting empty", "dir", s.cfg.Dir, "err", err)
		return nil
	}
	var out []SavedSnapshot
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(filepath.Join(s.cfg.Dir, name)) // a save cut short by a crash
			continue
		}
		id, ok := strings.CutSuffix(name, snapExt)
		if !ok {
			continue
		}
		owner, tokens, size, used, err := s.readHead(id)
		if err != nil {
			s.log.Warn("deleting snapshot", "id", id, "err", err)
			os.Remove(s.path(id))
			continue
		}
		s.files[id] = &storeFile{owner: owner, tokens: len(tokens), bytes: size, used: used}
		s.bytes += size
		out = append(out, SavedSnapshot{ID: id, Owner: owner, Tokens: tokens, Bytes: size, Medium: MediumDisk})
	}
	return out
}

type snapHead struct {
	fingerprint      uint64
	tokens           uint32
	state, comp, sum uint64
	owner            uint32
}

func parseHead(b []byte) (snapHead, error) {
	if len(b) < snapHeader || string(b[:8]) != snapMagic {
		return snapHead{}, fmt.Errorf("%w: bad header", ErrSnapshotCorrupt)
	}
	le := binary.LittleEndian
	h := snapHead{fingerprint: le.Uint64(b[8:]), tokens: le.Uint32(b[16:]), state: le.Uint64(b[20:]),
		comp: le.Uint64(b[28:]), sum: le.Uint64(b[36:]), owner: le.Uint32(b[44:])}
	if h.owner > maxOwner {
		return snapHead{}, fmt.Errorf("%w: owner of %d bytes", ErrSnapshotCorrupt, h.owner)
	}
	return h, nil
}

// readHead reads and checks a file's header, owner and token ids.
func (s *Store) readHead(id string) (Owner, []int, int64, time.Time, error) {
	fail := func(err error) (Owner, []int, int64, time.Time, error) { return Owner{}, nil, 0, time.Time{}, err }
	f, err := os.Open(s.path(id))
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	hb := make([]byte, snapHeader)
	if _, err := io.ReadFull(f, hb); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err))
	}
	h, err := parseHead(hb)
	if err != nil {
		return fail(err)
	}
	if h.fingerprint != s.cfg.Fingerprint {
		return fail(ErrSnapshotMismatch)
	}
	if want := int64(snapHeader) + int64(h.owner) + 4*int64(h.tokens) + int64(h.comp); st.Size() != want {
		return fail(fmt.Errorf("%w: %d bytes, header says %d", ErrSnapshotCorrupt, st.Size(), want))
	}
	ob := make([]byte, int(h.owner))
	tb := make([]byte, 4*int(h.tokens))
	if _, err := io.ReadFull(f, ob); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err))
	}
	if _, err := io.ReadFull(f, tb); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err))
	}
	owner, err := decodeOwner(ob)
	if err != nil {
		return fail(err)
	}
	return owner, decodeTokens(tb), st.Size(), st.ModTime(), nil
}

func decodeTokens(b []byte) []int {
	out := make([]int, len(b)/4)
	for i := range out {
		out[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// SnapshotID names the snapshot of a token sequence held for owner: two
// tenants (or conversations) with the same tokens get files of their own.
func SnapshotID(owner Owner, tokens []int) string {
	h := xxhash.New()
	ob := encodeOwner(owner)
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(len(ob)))
	h.Write(b[:])
	h.Write(ob)
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], h.Sum64())
	return hex.EncodeToString(sum[:])
}

// Has reports whether a snapshot is on disk (and marks it used, in memory
// and in the file's modification time).
func (s *Store) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f != nil {
		s.touch(id, f)
	}
	return f != nil
}

// touch records a use of f now: in memory, and, when snapshots expire, in
// the file's modification time so that the age survives a restart (without
// a TTL no age is ever read back, and the engine's slot hand-over, which
// calls Has, pays no system call). Callers hold s.mu. A file whose time
// cannot be set keeps its older one: it may expire early, never late.
func (s *Store) touch(id string, f *storeFile) {
	f.used = s.cfg.Now()
	if s.cfg.TTL == 0 || f.mem != nil {
		return
	}
	if err := os.Chtimes(s.path(id), time.Time{}, f.used); err != nil {
		s.log.Warn("snapshot use not recorded on disk", "id", id, "err", err)
	}
}

// Save queues a snapshot of tokens with their KV state. It does not block:
// it returns false if the queue is full (the save is dropped). done, if not
// nil, is called from the writer goroutine with the result. The store owns
// tokens and state from here on.
func (s *Store) Save(owner Owner, tokens []int, state []byte, done func(SavedSnapshot, error)) bool {
	id := SnapshotID(owner, tokens)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[id] != nil {
		// The same content is being saved already; a save asked for after
		// its owner was deleted (the conversation came back) stands.
		delete(s.cancelled, id)
		return true
	}
	select {
	case s.jobs <- saveJob{id: id, owner: owner, tokens: tokens, state: state, done: done}:
		s.pending[id] = make(chan struct{})
		s.queued[id] = owner
		return true
	default:
		return false
	}
}

// Pending reports whether a save of id is queued or being written.
func (s *Store) Pending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[id] != nil
}

// Flush waits until the saves queued before it are written (or failed).
// It blocks; safe for concurrent use.
func (s *Store) Flush() {
	s.mu.Lock()
	waits := make([]chan struct{}, 0, len(s.pending))
	for _, ch := range s.pending {
		waits = append(waits, ch)
	}
	s.mu.Unlock()
	for _, ch := range waits {
		<-ch
	}
}

// Close waits for queued saves to be written and stops the writer and the
// expiry loop. Safe to call more than once.
func (s *Store) Close() {
	s.close.Do(func() {
		close(s.stop)
		close(s.jobs)
		s.wg.Wait()
		s.dec.Close()
	})
}

// writer compresses and writes queued saves, one at a time, with one zstd
// encoder at its fastest level: KV compresses little, and the engine's
// threads need the cores.
func (s *Store) writer() {
	defer s.wg.Done()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err) // only for invalid options, which are constant here
	}
	defer enc.Close()
	for job := range s.jobs {
		s.mu.Lock()
		cancelled := s.cancelled[job.id]
		s.mu.Unlock()
		var saved SavedSnapshot
		err := ErrSaveCancelled
		if !cancelled {
			saved, err = s.write(enc, job)
		}
		if err != nil && !errors.Is(err, ErrSaveCancelled) {
			s.log.Warn("snapshot not saved", "id", job.id, "tokens", len(job.tokens), "err", err)
		}
		// The save is no longer pending when done is called: done is the
		// signal that the store is through with it.
		s.mu.Lock()
		close(s.pending[job.id])
		delete(s.pending, job.id)
		delete(s.queued, job.id)
		delete(s.cancelled, job.id)
		s.mu.Unlock()
		if job.done != nil {
			job.done(saved, err)
		}
	}
}

func (s *Store) write(enc *zstd.Encoder, job saveJob) (SavedSnapshot, error) {
	tb := make([]byte, 4*len(job.tokens))
	for i, t := range job.tokens {
		binary.LittleEndian.PutUint32(tb[4*i:], uint32(int32(t)))
	}
	comp := enc.EncodeAll(job.state, nil)
	ob := encodeOwner(job.owner)
	if len(ob) > maxOwner {
		return SavedSnapshot{}, fmt.Errorf("snapshot owner of %d bytes exceeds %d", len(ob), maxOwner)
	}
	h := xxhash.New()
	h.Write(ob)
	h.Write(tb)
	h.Write(job.state)
	head := make([]byte, snapHeader)
	copy(head, snapMagic)
	le := binary.LittleEndian
	le.PutUint64(head[8:], s.cfg.Fingerprint)
	le.PutUint32(head[16:], uint32(len(job.tokens)))
	le.PutUint64(head[20:], uint64(len(job.state)))
	le.PutUint64(head[28:], uint64(len(comp)))
	le.PutUint64(head[36:], h.Sum64())
	le.PutUint32(head[44:], uint32(len(ob)))
	image := slices.Concat(head, ob, tb, comp)
	size := int64(len(image))
	saved := s.cfg.Now()
	if s.keepInRAM(size) {
		s.mu.Lock()
		if s.cancelled[job.id] {
			s.mu.Unlock()
			return SavedSnapshot{}, ErrSaveCancelled
		}
		s.putRAM(job.id, job.owner, len(job.tokens), image, saved)
		s.mu.Unlock()
		s.dropExtended(job.id, job.owner, job.tokens)
		s.trimRAM(job.id)
		return SavedSnapshot{ID: job.id, Owner: job.owner, Tokens: job.tokens, Bytes: size, Medium: MediumRAM}, nil
	}
	if size > s.cfg.MaxBytes {
		return SavedSnapshot{}, fmt.Errorf("snapshot of %d bytes exceeds the disk budget of %d", size, s.cfg.MaxBytes)
	}
	if err := s.writeFile(job.id, image, saved); err != nil {
		return SavedSnapshot{}, err
	}
	s.mu.Lock()
	if s.cancelled[job.id] { // its owner was deleted while it was written
		s.mu.Unlock()
		os.Remove(s.path(job.id))
		return SavedSnapshot{}, ErrSaveCancelled
	}
	s.unindex(job.id)
	s.files[job.id] = &storeFile{owner: job.owner, tokens: len(job.tokens), bytes: size, used: saved}
	s.bytes += size
	s.mu.Unlock()
	s.dropExtended(job.id, job.owner, job.tokens)
	s.trim(job.id)
	return SavedSnapshot{ID: job.id, Owner: job.owner, Tokens: job.tokens, Bytes: size, Medium: MediumDisk}, nil
}

// dropExtended deletes owner's snapshots, but keep, whose tokens begin
// keep's tokens: a conversation saved again after it went on holds all an
// older snapshot of it holds, and a restore takes what a prompt shares
// with the snapshot, so the older one would only take room from others
// (bench fleet: with every older snapshot kept, returns whose KV both
// tiers had lost cost 0.14× the oracle's prefill at load 0.2; 0.09×
// without them). A snapshot being demoted is left to a later save. The
// ids are told to OnEvict, as evictions are.
func (s *Store) dropExtended(keep string, owner Owner, tokens []int) {
	s.mu.Lock()
	onDisk := map[string]bool{} // the snapshots dropped: whether each has a file
	for id, f := range s.files {
		if id != keep && f.owner == owner && f.tokens < len(tokens) && s.pending[id] == nil && SnapshotID(owner, tokens[:f.tokens]) == id {
			onDisk[id] = s.unindex(id).mem == nil
		}
	}
	onEvict := s.onEvict
	s.mu.Unlock()
	for id, file := range onDisk {
		if file {
			os.Remove(s.path(id))
		}
		if onEvict != nil {
			onEvict(id)
		}
	}
}

// OnEvict sets a function called with the id of every snapshot the disk
// budget evicts; the engine uses it to drop them from the registry.
func (s *Store) OnEvict(f func(id string)) { s.mu.Lock(); s.onEvict = f; s.mu.Unlock() }

// trim deletes least recently used files until the budget holds, sparing keep.
func (s *Store) trim(keep string) {
	s.mu.Lock()
	var gone []string
	for s.bytes > s.cfg.MaxBytes {
		oldest := ""
		for id, f := range s.files {
			if id != keep && f.mem == nil && (oldest == "" || f.used.Before(s.files[oldest].used)) {
				oldest = id
			}
		}
		if oldest == "" {
			break
		}
		s.unindex(oldest)
		gone = append(gone, oldest)
	}
	onEvict := s.onEvict
	s.mu.Unlock()
	for _, id := range gone {
		os.Remove(s.path(id))
		if onEvict != nil {
			onEvict(id)
		}
	}
}

// Loaded is a snapshot read back from disk.
type Loaded struct {
	Owner  Owner
	Tokens []int
	State  []byte
	Medium Medium // where it was read from
}

// Load reads, verifies and decompresses a snapshot. A snapshot that fails
// verification is deleted; the error wraps ErrSnapshotCorrupt,
// ErrSnapshotMismatch or ErrSnapshotMissing. It blocks on disk I/O: call it
// off the decode path.
func (s *Store) Load(id string) (Loaded, error) {
	s.mu.Lock()
	wait := s.pending[id]
	s.mu.Unlock()
	if wait != nil {
		<-wait // a save still being written: the file is complete after it
	}
	l, err := s.load(id)
	if errors.Is(err, ErrSnapshotMissing) && s.Pending(id) {
		// Demoted from RAM to disk between the wait and the read: the
		// file is complete once the demotion is through.
		s.mu.Lock()
		wait = s.pending[id]
		s.mu.Unlock()
		if wait != nil {
			<-wait
		}
		l, err = s.load(id)
	}
	if err != nil {
		s.Delete(id)
		return Loaded{}, fmt.Errorf("kvcache: snapshot %s: %w", id, err)
	}
	s.Has(id) // mark used: a restore refreshes its age
	return l, nil
}

func (s *Store) load(id string) (Loaded, error) {
	s.mu.Lock()
	var mem []byte
	if f := s.files[id]; f != nil {
		mem = f.mem // never written again: a demotion writes it out and drops it
	}
	s.mu.Unlock()
	if mem != nil {
		l, err := decodeSnapshot(s.dec, mem, s.cfg.Fingerprint)
		l.Medium = MediumRAM
		return l, err
	}
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Loaded{}, ErrSnapshotMissing
	}
	if err != nil {
		return Loaded{}, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	l, err := decodeSnapshot(s.dec, b, s.cfg.Fingerprint)
	l.Medium = MediumDisk
	return l, err
}

// maxExpansion and minStateBound bound the state a snapshot's header may
// claim: at most maxExpansion times its compressed bytes, or minStateBound
// if more. KV is fp16 or quantized activations, which zstd at its fastest
// level shrinks by well under 2×; only small states (empty cells, tests)
// compress much better. A header claiming more (a flipped bit in its
// state size, a decompression bomb) is corrupt, refused before anything is
// allocated for it.
const (
	maxExpansion  = 16
	minStateBound = 64 << 20
)

// decodeSnapshot verifies and decodes the bytes of a snapshot file written
// for the model with fingerprint: its token ids and its state. dec must
// have been made with zstd.WithDecodeAllCapLimit, so no more than the
// header's state size is ever decoded. Errors wrap ErrSnapshotCorrupt or
// ErrSnapshotMismatch; whatever b holds, it allocates at most about
// max(maxExpansion × len(b), minStateBound).
func decodeSnapshot(dec *zstd.Decoder, b []byte, fingerprint uint64) (Loaded, error) {
	h, err := parseHead(b)
	if err != nil {
		return Loaded{}, err
	}
	if h.fingerprint != fingerprint {
		return Loaded{}, ErrSnapshotMismatch
	}
	ownEnd := snapHeader + int(h.owner)
	tokEnd := ownEnd + 4*int(h.tokens)
	if uint64(len(b)) != uint64(tokEnd)+h.comp {
		return Loaded{}, fmt.Errorf("%w: %d bytes, header says %d", ErrSnapshotCorrupt, len(b), uint64(tokEnd)+h.comp)
	}
	if h.state > max(maxExpansion*h.comp, minStateBound) {
		return Loaded{}, fmt.Errorf("%w: %d bytes of state from %d compressed", ErrSnapshotCorrupt, h.state, h.comp)
	}
	state, err := dec.DecodeAll(b[tokEnd:], make([]byte, 0, h.state))
	if err != nil {
		return Loaded{}, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	sum := xxhash.New()
	sum.Write(b[snapHeader:tokEnd])
	sum.Write(state)
	if uint64(len(state)) != h.state || sum.Sum64() != h.sum {
		return Loaded{}, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	owner, err := decodeOwner(b[snapHeader:ownEnd])
	if err != nil {
		return Loaded{}, err
	}
	return Loaded{Owner: owner, Tokens: decodeTokens(b[ownEnd:tokEnd]), State: state}, nil
}

// DeleteOwned removes every snapshot of owner (a deleted conversation) and
// returns their ids, so the caller can drop them from the registry. Saves
// of owner still queued or being written are cancelled: they are not
// written, or removed once written, and their done gets ErrSaveCancelled;
// their ids are returned too. Safe for concurrent use; it blocks on file
// removal.
func (s *Store) DeleteOwned(owner Owner) []string {
	s.mu.Lock()
	var ids []string
	for id, o := range s.queued {
		if o == owner && !s.cancelled[id] {
			s.cancelled[id] = true
			ids = append(ids, id)
		}
	}
	for id, f := range s.files {
		if f.owner == owner {
			ids = append(ids, id)
			s.unindex(id)
		}
	}
	s.mu.Unlock()
	slices.Sort(ids)
	ids = slices.Compact(ids) // a file and a save of it queued again
	for _, id := range ids {
		os.Remove(s.path(id))
	}
	return ids
}

// newSnapshotDecoder returns the decoder decodeSnapshot needs.
func newSnapshotDecoder() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true))
}

// Delete removes a snapshot.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	s.unindex(id)
	s.mu.Unlock()
	os.Remove(s.path(id))
}

// Bytes returns the bytes on disk (RAMBytes, those in RAM).
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}
