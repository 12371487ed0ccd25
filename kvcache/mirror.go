package kvcache

import (
	"errors"
	"fmt"
	"slices"
)

// The mirror: a subscriber's copy of what a journal says a node's slots
// hold. It applies events in order and refuses a gap, so its owner resyncs
// from a snapshot instead of believing a view with a hole in it.
//
// Invariant: after Apply returned nil, the mirror equals the journal's
// slots, snapshots and restore speed at Cursor().After (journal
// invariants 3 and 6).

// ErrJournalGap: an event does not follow the last one applied (a lost
// event, another epoch, or no snapshot yet); resubscribe from Cursor.
var ErrJournalGap = errors.New("kvcache: journal event out of sequence")

// Mirror is a subscriber's copy of a node's slots. Not safe for concurrent
// use: one follower owns it.
type Mirror struct {
	blockTokens int
	cursor      Cursor
	synced      bool
	slots       map[int]SlotTokens
	load        Load
	saved       map[string]SavedTokens
	restore     RestoreSpeed
	// savedChanged lists the snapshots whose state Apply changed since
	// SavedChanges last drained it.
	savedChanged []string
}

// NewMirror returns an empty mirror; its first snapshot says the
// journal's block size.
func NewMirror() *Mirror {
	return &Mirror{blockTokens: 1, slots: map[int]SlotTokens{}, saved: map[string]SavedTokens{}}
}

// Cursor returns where a resubscription resumes: after the last event
// applied (the zero Cursor before the first snapshot).
func (m *Mirror) Cursor() Cursor {
	if !m.synced {
		return Cursor{}
	}
	return m.cursor
}

// Apply applies ev and returns the slots whose content it changed (every
// slot the mirror or the snapshot holds, for a snapshot). An event that
// does not follow the last one is refused with ErrJournalGap and changes
// nothing; a snapshot is always taken.
func (m *Mirror) Apply(ev JournalEvent) ([]int, error) {
	if ev.Type == EventSnapshot {
		changed := make([]int, 0, len(m.slots)+len(ev.Slots))
		for s := range m.slots {
			changed = append(changed, s)
		}
		clear(m.slots)
		for _, st := range ev.Slots {
			st.Tokens = slices.Clone(st.Tokens) // the mirror's own: applySlot writes in place
			m.slots[st.Slot] = st
			changed = append(changed, st.Slot)
		}
		if ev.Load != nil {
			m.load = *ev.Load
		}
		m.blockTokens = max(ev.BlockTokens, 1)
		m.replaceSaved(ev.Snapshots)
		m.restore = RestoreSpeed{}
		if ev.Restore != nil {
			m.restore = *ev.Restore
		}
		m.cursor, m.synced = Cursor{Epoch: ev.Epoch, After: ev.Seq}, true
		slices.Sort(changed)
		return slices.Compact(changed), nil
	}
	if !m.synced || ev.Epoch != m.cursor.Epoch || ev.Seq != m.cursor.After+1 {
		return nil, fmt.Errorf("event %d of epoch %q after %d of %q: %w", ev.Seq, ev.Epoch, m.cursor.After, m.cursor.Epoch, ErrJournalGap)
	}
	var changed []int
	switch ev.Type {
	case EventStored, EventRemoved:
		if err := m.applySlot(ev); err != nil {
			return nil, err
		}
		changed = []int{ev.Slot}
	case EventSavedStored, EventSavedRemoved:
		if err := m.applySaved(ev); err != nil {
			return nil, err
		}
	case EventRestoreSpeed:
		if ev.Restore != nil {
			m.restore = *ev.Restore
		}
	case EventLoad:
		if ev.Load != nil {
			m.load = *ev.Load
		}
	}
	// Unknown types are skipped: a newer node may publish more.
	m.cursor.After = ev.Seq
	return changed, nil
}

// applySlot applies a stored or removed event to its slot.
func (m *Mirror) applySlot(ev JournalEvent) error {
	cur := m.slots[ev.Slot]
	from := ev.FromBlock * m.blockTokens
	if ev.Slot < 0 || ev.FromBlock < 0 || from > len(cur.Tokens) || len(ev.Tokens)%m.blockTokens != 0 {
		return fmt.Errorf("event %d: slot %d from block %d over %d tokens: %w", ev.Seq, ev.Slot, ev.FromBlock, len(cur.Tokens), ErrJournalGap)
	}
	// Written in place after what the event keeps: a turn changes a slot's
	// last blocks, and copying the whole conversation at each event was
	// the one cost here that grew with it. The tokens are the mirror's own
	// (a snapshot's are copied, an event's appended), and Slot's callers
	// keep them only until the next Apply.
	tokens := cur.Tokens[:from]
	tenant := cur.Tenant
	if ev.Type == EventStored {
		tokens, tenant = append(tokens, ev.Tokens...), ev.Tenant
	}
	if len(tokens) == 0 {
		delete(m.slots, ev.Slot)
		return nil
	}
	m.slots[ev.Slot] = SlotTokens{Slot: ev.Slot, Tenant: tenant, Tokens: tokens}
	return nil
}

// replaceSaved makes the mirror's snapshots those of a journal snapshot;
// every one held before or after counts as changed.
func (m *Mirror) replaceSaved(saved []SavedTokens) {
	for id := range m.saved {
		m.savedChanged = append(m.savedChanged, id)
	}
	clear(m.saved)
	for _, st := range saved {
		m.saved[st.ID] = st
		m.savedChanged = append(m.savedChanged, st.ID)
	}
}

// applySaved applies a snapshot_stored or snapshot_removed event.
func (m *Mirror) applySaved(ev JournalEvent) error {
	if ev.Saved == nil || ev.Saved.ID == "" {
		return fmt.Errorf("event %d: %s without a snapshot: %w", ev.Seq, ev.Type, ErrJournalGap)
	}
	st := *ev.Saved
	if ev.Type == EventSavedRemoved {
		delete(m.saved, st.ID)
	} else {
		prev, known := m.saved[st.ID]
		if len(st.Tokens) == 0 {
			if !known {
				return fmt.Errorf("event %d: snapshot %s moved before it was stored: %w", ev.Seq, st.ID, ErrJournalGap)
			}
			st.Tenant, st.Tokens = prev.Tenant, prev.Tokens
		}
		if len(st.Tokens)%m.blockTokens != 0 {
			return fmt.Errorf("event %d: snapshot %s of %d tokens: %w", ev.Seq, st.ID, len(st.Tokens), ErrJournalGap)
		}
		m.saved[st.ID] = st
	}
	m.savedChanged = append(m.savedChanged, st.ID)
	return nil
}

// SavedChanges returns, once, the snapshots whose state the events
// applied since the last call changed (sorted, each once).
func (m *Mirror) SavedChanges() []string {
	out := m.savedChanged
	m.savedChanged = nil
	slices.Sort(out)
	return slices.Compact(out)
}

// Saved returns what the node says snapshot id holds, and whether it holds
// it (its tokens are the mirror's: do not write them).
func (m *Mirror) Saved(id string) (SavedTokens, bool) {
	st, ok := m.saved[id]
	return st, ok
}

// RestoreSpeed returns the node's restore speed as last published.
func (m *Mirror) RestoreSpeed() RestoreSpeed { return m.restore }

// Slot returns what slot holds. Its tokens are the mirror's: do not write
// them, nor keep them past the next Apply, which may write them in place.
func (m *Mirror) Slot(slot int) SlotTokens {
	st := m.slots[slot]
	st.Slot = slot
	return st
}

// BlockTokens returns the journal's block size, as its last snapshot said
// (1 before one): an event's FromBlock counts these.
func (m *Mirror) BlockTokens() int { return m.blockTokens }

// Load returns the node's load as last published.
func (m *Mirror) Load() Load { return m.load }
