package kvcache

// The journal: what a node's slots hold, as a stream of sequenced changes
// that every gateway of a fleet follows (docs/fleet.md, "Residency from the
// nodes"), so all of them hold the node's own view instead of guessing from
// their own share of the traffic.
//
// Events carry token ids, not block keys: a gateway keys blocks in its own
// namespace (its model id, its tenant salts), so it recomputes keys from
// the tokens, as llm-d's routers do from vLLM's BlockStored events.
//
// Invariants, true whenever mu is not held:
//
//  1. seq is the sequence number of the last event published; events are
//     numbered 1, 2, … without a gap within one epoch. A journal's epoch is
//     random at New: a node that restarts starts another epoch, and a
//     subscriber resuming from the old one gets a snapshot.
//  2. history holds the last events, at most cfg.History of them, as a
//     ring whose oldest is at start; the events (after, seq] can be
//     replayed iff after >= seq - len(history).
//  3. slots[s] holds exactly what the events published so far say slot s
//     holds: replaying a snapshot and the events after it gives slots.
//     Only full blocks are published; a slot's tokens are a whole number
//     of blocks.
//  4. Every subscriber has received, or has in its channel, every event up
//     to seq, or it was dropped (its channel closed). Publishing never
//     waits for a subscriber: one whose channel is full is dropped and
//     resumes later from its last sequence number (a replay, or a
//     snapshot when the history no longer reaches back that far).
//  5. Published token slices are never written again: events share them.
//  6. saved[id] holds exactly what the snapshot events published so far say
//     the node's snapshot store holds under id: its tier (RAM or disk), its
//     owner's tenant and the tokens of its full blocks. A snapshot event
//     carries them all, so a gateway resuming after a restart (another
//     epoch) learns at once that the RAM tier was emptied.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
)

// Journal event types.
const (
	EventSnapshot = "snapshot" // every slot's content and the load, at Seq
	EventStored   = "stored"   // Slot now holds Tokens from block FromBlock on
	EventRemoved  = "removed"  // Slot dropped its blocks from FromBlock on
	EventLoad     = "load"     // the node's requests running and waiting changed
	// EventSavedStored: the node's snapshot store holds Saved now, in
	// Saved.Tier; with no tokens, a snapshot already published moved there.
	EventSavedStored = "snapshot_stored"
	// EventSavedRemoved: the snapshot Saved.ID is gone from every tier.
	EventSavedRemoved = "snapshot_removed"
	// EventRestoreSpeed: the node's measured restore speed changed.
	EventRestoreSpeed = "restore_speed"
)

// RestoreSpeed is how fast a node restores a snapshot into a slot, per
// tier: prompt tokens per second, reading, decoding and copying the state
// in (0: not measured yet).
type RestoreSpeed struct {
	RAM  float64 `json:"ram_tokens_per_second,omitempty"`
	Disk float64 `json:"disk_tokens_per_second,omitempty"`
}

// Of returns the speed of restoring from m.
func (r RestoreSpeed) Of(m Medium) float64 {
	if m == MediumRAM {
		return r.RAM
	}
	return r.Disk
}

// Rounded is r to two significant digits per tier, as a node publishes it:
// noise in its measurement does not flood the journal.
func (r RestoreSpeed) Rounded() RestoreSpeed {
	return RestoreSpeed{RAM: twoDigits(r.RAM), Disk: twoDigits(r.Disk)}
}

// twoDigits rounds v to two significant digits.
func twoDigits(v float64) float64 {
	if v <= 0 {
		return 0
	}
	scale := math.Pow(10, math.Floor(math.Log10(v))-1)
	return math.Round(v/scale) * scale
}

// ErrSubscriberDropped: the subscriber fell behind the journal by more than
// its buffer and was dropped; it resumes from the last event it read.
var ErrSubscriberDropped = errors.New("kvcache: journal subscriber fell behind and was dropped")

// JournalConfig configures a Journal. Zero fields take the defaults.
type JournalConfig struct {
	// BlockTokens is the block size: only full blocks are published.
	// Default 16 (DefaultBlockTokens).
	BlockTokens int
	// History is how many events are kept for subscribers resuming after a
	// gap. Default 4096: with two events per turn, minutes of a busy node,
	// long enough to ride out a gateway's reconnect backoff.
	History int
	// Buffer is how many events a subscriber may lag behind before it is
	// dropped. Default 1024.
	Buffer int
}

// SlotTokens is what one slot holds: whose tokens, and the tokens of its
// full blocks.
type SlotTokens struct {
	Slot   int    `json:"slot"`
	Tenant string `json:"tenant,omitempty"`
	Tokens []int  `json:"tokens"`
}

// SavedTokens is one snapshot a node's store holds (kvcache.Store): its
// id, whose, where, its size, and the tokens of its full blocks.
type SavedTokens struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	Tier   Medium `json:"tier"`
	Bytes  int64  `json:"bytes,omitempty"`
	Tokens []int  `json:"tokens,omitempty"`
}

// Load is a node's requests running in slots and waiting for one.
type Load struct {
	Running int `json:"running"`
	Waiting int `json:"waiting"`
}

// JournalEvent is one change of a node's slots, or a snapshot of all of
// them. Slot, Tenant, FromBlock and Tokens are set for stored and removed
// events; Slots, Load and BlockTokens for a snapshot; Load for a load
// event.
type JournalEvent struct {
	Seq       uint64       `json:"seq"`
	Epoch     string       `json:"epoch"`
	Type      string       `json:"type"`
	Slot      int          `json:"slot"`
	Tenant    string       `json:"tenant,omitempty"`
	FromBlock int          `json:"from_block"`
	Tokens    []int        `json:"tokens,omitempty"`
	Slots     []SlotTokens `json:"slots,omitempty"`
	// BlockTokens is the journal's block size, on a snapshot.
	BlockTokens int   `json:"block_tokens,omitempty"`
	Load        *Load `json:"load,omitempty"`
	// Saved is the snapshot of a snapshot_stored or snapshot_removed
	// event (only its ID on a removal); Snapshots, on a snapshot event,
	// every snapshot the store holds.
	Saved     *SavedTokens  `json:"saved,omitempty"`
	Snapshots []SavedTokens `json:"snapshots,omitempty"`
	// Restore is the node's restore speed, on a restore_speed event and a
	// snapshot.
	Restore *RestoreSpeed `json:"restore,omitempty"`
}

// Cursor is where a subscriber resumes: after event After of Epoch. The
// zero Cursor (or one of another epoch, or one the history no longer
// reaches) starts from a snapshot. On the wire (a node's final /completion
// object, "kvwin_journal") it is {"epoch", "seq"}, as the events' own.
type Cursor struct {
	Epoch string `json:"epoch"`
	After uint64 `json:"seq"`
}

// Journal publishes what a node's slots hold. Safe for concurrent use; no
// method waits for anything but a short lock, and publishing never waits
// for a subscriber.
type Journal struct {
	cfg   JournalConfig
	epoch string

	mu      sync.Mutex
	seq     uint64
	history []JournalEvent // a ring: the oldest at start
	start   int
	slots   map[int]SlotTokens
	load    Load
	saved   map[string]SavedTokens
	restore RestoreSpeed
	subs    map[*Subscription]struct{}
}

// NewJournal returns an empty journal of a new epoch.
func NewJournal(cfg JournalConfig) (*Journal, error) {
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = DefaultBlockTokens
	}
	if cfg.History == 0 {
		cfg.History = 4096
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 1024
	}
	if cfg.BlockTokens < 1 || cfg.BlockTokens > maxBlock || cfg.History < 1 || cfg.Buffer < 1 {
		return nil, fmt.Errorf("kvcache: journal %+v: %w", cfg, ErrInvalidConfig)
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return &Journal{cfg: cfg, epoch: hex.EncodeToString(b[:]), slots: map[int]SlotTokens{}, saved: map[string]SavedTokens{}, subs: map[*Subscription]struct{}{}}, nil
}

// Epoch returns the journal's epoch.
func (j *Journal) Epoch() string { return j.epoch }

// Cursor returns where the journal stands: after its last event.
func (j *Journal) Cursor() Cursor {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Cursor{Epoch: j.epoch, After: j.seq}
}

// BlockTokens returns the journal's block size.
func (j *Journal) BlockTokens() int { return j.cfg.BlockTokens }

// SetSlot states that slot holds tokens of tenant now (its KV, positions
// 0..len-1); the partial last block is left out. It publishes what
// changed: the blocks dropped past what the slot still shares with its
// previous content (all of them when the tenant changed), then the blocks
// added. tokens is copied.
func (j *Journal) SetSlot(slot int, tenant string, tokens []int) {
	bt := j.cfg.BlockTokens
	tokens = tokens[:len(tokens)/bt*bt]
	if len(tokens) == 0 {
		tenant = ""
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	prev := j.slots[slot]
	common := 0
	if prev.Tenant == tenant {
		common = SharedPrefix(prev.Tokens, tokens) / bt * bt
	}
	if len(prev.Tokens) > common {
		j.publish(JournalEvent{Type: EventRemoved, Slot: slot, FromBlock: common / bt})
	}
	if len(tokens) > common {
		j.publish(JournalEvent{Type: EventStored, Slot: slot, Tenant: tenant, FromBlock: common / bt, Tokens: slices.Clone(tokens[common:])})
	}
	if len(tokens) == 0 {
		delete(j.slots, slot)
		return
	}
	// The held tokens are written in place after what they share: a turn
	// changes its slot's last blocks, and copying the whole conversation
	// each turn was the one cost here that grew with it. snapshot copies
	// what it hands out, so nothing else holds this slice.
	held := prev.Tokens[:common]
	j.slots[slot] = SlotTokens{Slot: slot, Tenant: tenant, Tokens: append(held, tokens[common:]...)}
}

// SetLoad states the node's requests running and waiting; a change is
// published.
func (j *Journal) SetLoad(l Load) {
	setChanged(j, &j.load, l, func(v *Load) JournalEvent { return JournalEvent{Type: EventLoad, Load: v} })
}

// setChanged sets *field to v and publishes event(v) if it was not v
// already.
func setChanged[T comparable](j *Journal, field *T, v T, event func(*T) JournalEvent) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if *field == v {
		return
	}
	*field = v
	j.publish(event(&v))
}

// SetSaved states that the node's snapshot store holds st now: saved, or
// moved to st.Tier (st.Tokens nil keeps the tokens published before). The
// partial last block is left out; a snapshot of no full block is not
// published. st.Tokens is copied.
func (j *Journal) SetSaved(st SavedTokens) {
	bt := j.cfg.BlockTokens
	st.Tokens = slices.Clone(st.Tokens[:len(st.Tokens)/bt*bt])
	j.mu.Lock()
	defer j.mu.Unlock()
	prev, known := j.saved[st.ID]
	if len(st.Tokens) == 0 {
		if !known {
			return
		}
		st.Tenant, st.Tokens = prev.Tenant, prev.Tokens
		if st.Bytes == 0 {
			st.Bytes = prev.Bytes
		}
	}
	j.saved[st.ID] = st
	ev := st
	if known && slices.Equal(prev.Tokens, st.Tokens) {
		ev.Tokens = nil // moved: the tokens are known
	}
	j.publish(JournalEvent{Type: EventSavedStored, Saved: &ev})
}

// SetRestoreSpeed states the node's restore speed; a change is published.
func (j *Journal) SetRestoreSpeed(rs RestoreSpeed) {
	setChanged(j, &j.restore, rs, func(v *RestoreSpeed) JournalEvent { return JournalEvent{Type: EventRestoreSpeed, Restore: v} })
}

// RemoveSaved states that snapshot id is gone from the node's store; an
// id never published is ignored.
func (j *Journal) RemoveSaved(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.saved[id]; !ok {
		return
	}
	delete(j.saved, id)
	j.publish(JournalEvent{Type: EventSavedRemoved, Saved: &SavedTokens{ID: id}})
}

// publish numbers ev, keeps it in the history and hands it to every
// subscriber that has room; the others are dropped. mu is held.
func (j *Journal) publish(ev JournalEvent) {
	j.seq++
	ev.Seq, ev.Epoch = j.seq, j.epoch
	if len(j.history) < j.cfg.History {
		j.history = append(j.history, ev)
	} else {
		j.history[j.start] = ev // the oldest makes room
		j.start = (j.start + 1) % len(j.history)
	}
	for s := range j.subs {
		select {
		case s.ch <- ev:
		default:
			j.drop(s)
		}
	}
}

// drop ends s's subscription: its channel is closed after what it holds.
// mu is held.
func (j *Journal) drop(s *Subscription) {
	delete(j.subs, s)
	s.dropped = true
	close(s.ch)
}

// snapshot is every slot's content and the load at seq. mu is held.
func (j *Journal) snapshot() JournalEvent {
	slots := make([]SlotTokens, 0, len(j.slots))
	for _, st := range j.slots {
		st.Tokens = slices.Clone(st.Tokens) // SetSlot writes the held ones in place
		slots = append(slots, st)
	}
	slices.SortFunc(slots, func(a, b SlotTokens) int { return a.Slot - b.Slot })
	saved := slices.Collect(maps.Values(j.saved)) // tokens never written again (invariant 5)
	slices.SortFunc(saved, func(a, b SavedTokens) int { return strings.Compare(a.ID, b.ID) })
	l, rs := j.load, j.restore
	return JournalEvent{Seq: j.seq, Epoch: j.epoch, Type: EventSnapshot, Slots: slots, Load: &l, BlockTokens: j.cfg.BlockTokens, Snapshots: saved, Restore: &rs}
}

// Subscribe starts a subscription at c: the events after c.After when c is
// of this epoch and the history still holds them, else a snapshot first
// and the events after it. Close ends it.
func (j *Journal) Subscribe(c Cursor) *Subscription {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := &Subscription{j: j, ch: make(chan JournalEvent, j.cfg.Buffer)}
	oldest := j.seq - uint64(len(j.history)) // events after oldest are held
	if c.Epoch == j.epoch && c.After <= j.seq && c.After >= oldest {
		for i := int(c.After - oldest); i < len(j.history); i++ {
			s.pending = append(s.pending, j.history[(j.start+i)%len(j.history)])
		}
	} else {
		s.pending = []JournalEvent{j.snapshot()}
	}
	j.subs[s] = struct{}{}
	return s
}

// Subscription is one subscriber's place in a journal. Next and Close may
// be called from one goroutine at a time.
type Subscription struct {
	j       *Journal
	ch      chan JournalEvent
	pending []JournalEvent // the replay or snapshot, before ch
	dropped bool           // guarded by j.mu
}

// C returns the channel of events after the pending ones; it is closed
// when the subscriber is dropped (Err then says so) or closed.
func (s *Subscription) C() <-chan JournalEvent { return s.ch }

// Pending returns, once, the events to deliver before those of C: the
// replay, or the snapshot.
func (s *Subscription) Pending() []JournalEvent {
	p := s.pending
	s.pending = nil
	return p
}

// Err returns ErrSubscriberDropped once the journal dropped s, else nil.
func (s *Subscription) Err() error {
	s.j.mu.Lock()
	defer s.j.mu.Unlock()
	if s.dropped {
		return ErrSubscriberDropped
	}
	return nil
}

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.j.mu.Lock()
	defer s.j.mu.Unlock()
	if _, ok := s.j.subs[s]; ok {
		delete(s.j.subs, s)
		close(s.ch)
	}
}
