package kvcache

// The registry: which location holds which key chain.
//
// Invariants, true whenever mu is not held for writing:
//
//  1. A slot holds exactly one chain, a snapshot exactly one; a chain is
//     prefix-closed (holding block i means holding blocks 0..i), because it
//     is always a prefix of some Chain's keys.
//  2. Every non-empty chain is listed in roots under its first key, at
//     position rootPos; an empty chain is listed nowhere (rootPos == -1);
//     roots holds no empty lists.
//  3. b.held is the sum of the lengths of b's slot chains; b.snapBlocks and
//     b.snapBytes are the sums over b's snapshots.
//  4. b.lru lists exactly b's slots whose chain is non-empty, most recently
//     used first.
//  5. b.capacity == 0 (unbounded) or b.held <= b.capacity.
//  6. A chain's keys are the registry's own copy: never a caller's slice,
//     never handed out. Reads return copies.
//  7. Counters only grow. They are atomics so that paths holding only the
//     read lock may bump them and Snapshot may read them beside writers of
//     other counters; structure changes always hold the write lock.
//
// Blocks are counted per slot: two slots holding the same system prompt hold
// it twice, as llama-server's slots each own their cells. For the embedded
// engine, whose forked prefixes share cells, the count is an upper bound, so
// the registry evicts early (a missed reuse), never late (a wrong belief).

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

// BackendConfig names a backend and its KV capacity in blocks
// (see Budget.CapacityBlocks); 0 means unbounded or not known yet.
type BackendConfig struct {
	Name           string `json:"name"`
	CapacityBlocks int    `json:"capacity_blocks"`
}

// Config configures a Registry.
type Config struct {
	Backends []BackendConfig `json:"backends"`
	// Logger receives warnings about backends misreporting reuse; nil discards.
	Logger *slog.Logger `json:"-"`
}

// Registry records which backend slot and snapshot holds which key chain. All
// methods are safe for concurrent use. None does I/O or waits for anything
// but a short lock: readers (Lookup, Held, Snapshot, the counters) share a
// read lock, writers hold the write lock for work linear in one chain.
type Registry struct {
	log *slog.Logger

	mu       sync.RWMutex
	backends map[string]*backend
	roots    index
}

type backend struct {
	name       string
	capacity   int
	held       int
	slots      map[int]*slot
	lru        lruList
	snaps      map[string]*snapshot
	snapBlocks int
	snapBytes  int64

	saves, restores, clamped, corrected atomic.Uint64
}

type slot struct {
	id int
	chain
	prev, next *slot // b.lru links
	listed     bool  // in b.lru

	hits, misses, evictions atomic.Uint64
}

// New returns a registry holding cfg.Backends. It fails on an empty or
// repeated name or a negative capacity.
func New(cfg Config) (*Registry, error) {
	r := &Registry{log: cfg.Logger, backends: map[string]*backend{}, roots: index{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for _, bc := range cfg.Backends {
		if _, dup := r.backends[bc.Name]; dup {
			return nil, fmt.Errorf("kvcache: backend %q listed twice: %w", bc.Name, ErrInvalidConfig)
		}
		if err := r.SetBackend(bc); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// OrNew returns r, or, if r is nil, a new empty registry logging to log:
// the registry of an engine or router that was given none to share.
func OrNew(r *Registry, log *slog.Logger) *Registry {
	if r != nil {
		return r
	}
	r, _ = New(Config{Logger: log}) // no backends: nothing to fail on
	return r
}

// SetBackend adds a backend or changes its capacity; a lower capacity evicts
// at once.
func (r *Registry) SetBackend(bc BackendConfig) error {
	if bc.Name == "" || bc.CapacityBlocks < 0 {
		return fmt.Errorf("kvcache: backend %q capacity %d: %w", bc.Name, bc.CapacityBlocks, ErrInvalidConfig)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backends[bc.Name]
	if b == nil {
		b = &backend{name: bc.Name, slots: map[int]*slot{}, snaps: map[string]*snapshot{}}
		r.backends[bc.Name] = b
	}
	b.capacity = bc.CapacityBlocks
	r.evict(b)
	return nil
}

// RemoveBackend forgets a backend, its residency and its counters.
func (r *Registry) RemoveBackend(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backends[name]
	if b == nil {
		return
	}
	for _, s := range b.slots {
		r.setChain(&s.chain, nil)
	}
	for _, sn := range b.snaps {
		r.setChain(&sn.chain, nil)
	}
	delete(r.backends, name)
}

// Record states that loc now holds c (a served request's prompt and
// generated blocks). The slot's previous chain is released past the prefix it
// shares with c, then the backend's least recently used chains are trimmed,
// tails first, until it fits its capacity. (A llama.cpp slot has not yet
// computed the KV of the last token it sampled: leave that token out of c.)
func (r *Registry) Record(loc Location, c Chain) error {
	if err := c.validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, s, err := r.slotAt(loc)
	if err != nil {
		return err
	}
	if released := len(s.keys) - commonPrefix(s.keys, c.Keys); released > 0 {
		s.evictions.Add(uint64(released))
	}
	r.setSlot(b, s, c.Keys)
	r.evict(b)
	return nil
}

// Correct reconciles the registry with the backend's report that, serving c
// at loc, it reused reused units (tokens, or bytes when c is Approximate) of
// it. Afterwards loc holds exactly the first floor(reused/BlockSize) blocks
// of c: what it held beyond is dropped, and a longer hold than the registry
// knew is learned. reused is clamped to 0..c.Length; a backend claiming more
// than it was sent is counted and logged, never believed. Correct is where
// hits (reused blocks) and misses (the chain's other blocks) are counted;
// call it once per served request, before Record.
func (r *Registry) Correct(loc Location, c Chain, reused int) error {
	if err := c.validate(); err != nil {
		return err
	}
	r.mu.Lock()
	b, s, err := r.slotAt(loc)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	reported := reused
	reused = max(0, min(reused, c.Length))
	if reused != reported {
		b.clamped.Add(1)
	}
	n := reused / c.BlockSize
	s.hits.Add(uint64(n))
	s.misses.Add(uint64(len(c.Keys) - n))
	if dropped := len(s.keys) - min(commonPrefix(s.keys, c.Keys), n); dropped > 0 {
		b.corrected.Add(uint64(dropped))
	}
	r.setSlot(b, s, c.Keys[:n])
	r.evict(b)
	r.mu.Unlock()
	if reused != reported {
		r.log.Warn("kvcache: backend reported reuse outside what it was sent; clamped",
			"backend", loc.Backend, "slot", loc.Slot, "reported", reported, "sent", c.Length, "clamped_to", reused)
	}
	return nil
}

// Release forgets what loc holds: its KV was erased or its backend restarted.
// The blocks count as evictions.
func (r *Registry) Release(loc Location) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, s, err := r.slotAt(loc)
	if err != nil {
		return err
	}
	s.evictions.Add(uint64(len(s.keys)))
	r.setSlot(b, s, nil)
	return nil
}

// Held returns a copy of the keys loc holds, nil if none.
func (r *Registry) Held(loc Location) []Key {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b := r.backends[loc.Backend]; b != nil {
		if s := b.slots[loc.Slot]; s != nil {
			return slices.Clone(s.keys)
		}
	}
	return nil
}

// slotAt finds loc's backend and slot, creating the slot. mu is held.
func (r *Registry) slotAt(loc Location) (*backend, *slot, error) {
	b, err := r.backend(loc.Backend)
	if err != nil {
		return nil, nil, err
	}
	if loc.Slot < 0 {
		return nil, nil, fmt.Errorf("kvcache: backend %q slot %d: %w", loc.Backend, loc.Slot, ErrInvalidSlot)
	}
	s := b.slots[loc.Slot]
	if s == nil {
		s = &slot{id: loc.Slot, chain: chain{rootPos: -1, b: b}}
		s.slot = s
		b.slots[loc.Slot] = s
	}
	return b, s, nil
}

// setSlot makes s hold keys (copied) and marks it most recently used. mu is
// held for writing.
func (r *Registry) setSlot(b *backend, s *slot, keys []Key) {
	b.held += len(keys) - len(s.keys)
	r.setChain(&s.chain, keys)
	if len(keys) == 0 {
		b.lru.remove(s)
	} else {
		b.lru.touch(s)
	}
}
