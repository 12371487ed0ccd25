package router

import (
	"context"
	"errors"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Slot state read from the backends.
//
// The registry learns residency from what the router sent and corrects it
// by the reuse a backend reports. Where a backend can also say what its
// slots hold (engine.SlotReader: llama-server's /slots), the router reads
// it when the backend joins (at start, when it comes back), when a turn's
// reported reuse is less than the registry believed (a restart between
// two health checks, a slot another client took), and otherwise at most
// every Config.SlotsInterval, and makes the registry agree, slot by slot:
//
//   - a slot whose prompt the server gives (older llama-server builds with
//     --slots): its tokens are keyed, and the registry holds them there,
//     unless it already holds them and more (the generated tokens, which
//     that prompt leaves out). A slot holding a prompt the router did not
//     send there is keyed only on a gateway of one tenant
//     (Config.SoleTenant); with several, its prompt belongs to nobody the
//     router knows, and the slot is taken to hold nothing.
//   - a slot the server only counts (newer builds): one holding fewer
//     tokens than the registry believes, or another number than the
//     router's last turn there left, was emptied or given to another
//     prompt, and holds nothing as far as the registry is concerned.
//   - a slot still processing is left alone, and so is one a turn ended on
//     while the answer was on its way.
//
// Where the backend does not serve /slots (501), residency is learned
// from turns alone, as before; the log says so once and
// BackendStatus.Residency says "learned".

// Residency: how a backend's residency is known.
const (
	ResidencyRead    = "read"    // from the backend's /slots, corrected by turns
	ResidencyLearned = "learned" // from turns alone: the backend does not serve /slots
)

const (
	residencyUnknown int32 = iota // not read yet
	residencyRead
	residencyLearned
)

// slotLearned is what the router's own turns left in one slot.
type slotLearned struct {
	tenant string // whose turn it was; "" none since start
	epoch  uint64 // turns recorded there
	count  int    // tokens the turn left in the slot's KV; -1 unknown
}

// noteTurn records that a turn of tenant left count tokens in slot.
func (m *member) noteTurn(slot int, tenant string, count int) {
	m.slotMu.Lock()
	defer m.slotMu.Unlock()
	if m.learned == nil {
		m.learned = map[int]slotLearned{}
	}
	l := m.learned[slot]
	l.tenant, l.count = tenant, count
	l.epoch++
	m.learned[slot] = l
}

// slotState returns what the router's turns left in slot.
func (m *member) slotState(slot int) slotLearned {
	m.slotMu.Lock()
	defer m.slotMu.Unlock()
	if l, ok := m.learned[slot]; ok {
		return l
	}
	return slotLearned{count: -1}
}

// epochs returns every slot's epoch.
func (m *member) epochs() map[int]uint64 {
	m.slotMu.Lock()
	defer m.slotMu.Unlock()
	out := make(map[int]uint64, len(m.learned))
	for s, l := range m.learned {
		out[s] = l.epoch
	}
	return out
}

// forgetSlot forgets what the router's turns left in slot: the server
// says it holds something else.
func (m *member) forgetSlot(slot int) {
	m.slotMu.Lock()
	l := m.learned[slot]
	l.tenant, l.count = "", -1
	l.epoch++
	if m.learned != nil {
		m.learned[slot] = l
	}
	m.slotMu.Unlock()
	m.ownMu.Lock()
	if slot < len(m.owners) {
		m.owners[slot].tenant = ""
	}
	m.ownMu.Unlock()
}

// residency says how m's residency is known ("" before the first read).
func (m *member) residency() string {
	if m.following.Load() {
		return ResidencyEvents
	}
	switch m.resMode.Load() {
	case residencyRead:
		return ResidencyRead
	case residencyLearned:
		return ResidencyLearned
	}
	return ""
}

// readDue reports whether m's slots should be read now: it can tell them,
// and it joined (first, or rejoin), a turn disagreed, or the interval
// passed. Called by the check that owns m.lastRead.
func (r *Router) readDue(m *member, rejoin bool) bool {
	if m.reader == nil || m.following.Load() {
		return false // nothing to read, or its journal says it (follow.go)
	}
	if rejoin {
		m.resMode.Store(residencyUnknown) // perhaps restarted with --slots now
	}
	if m.resMode.Load() == residencyLearned {
		return false
	}
	return rejoin || m.lastRead.IsZero() || m.wantRead.Load() || time.Since(m.lastRead) >= r.cfg.SlotsInterval
}

// readSlots reads m's slots and makes the registry agree (see above). It
// blocks on the backend for at most HealthTimeout. Called by the check
// that owns m.lastRead.
func (r *Router) readSlots(ctx context.Context, m *member) {
	m.wantRead.Store(false)
	m.lastRead = time.Now()
	before := m.epochs()
	cctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	contents, err := m.reader.ReadSlots(cctx)
	cancel()
	switch {
	case errors.Is(err, engine.ErrNotSupported):
		if m.resMode.Swap(residencyLearned) != residencyLearned {
			r.log.Info("backend does not serve /slots; its residency is learned from turns, not read", "backend", m.name)
			r.changed() // Status says so now: its watchers must hear it
		}
		return
	case err != nil:
		r.log.Debug("backend slots not read", "backend", m.name, "err", err)
		return
	}
	for _, c := range contents {
		if c.Processing || c.ID < 0 || c.ID >= m.slotCount() || m.slotState(c.ID).epoch != before[c.ID] {
			continue
		}
		r.agree(m, c)
	}
	// Read, and agreed with, once the mode says so.
	if m.resMode.Swap(residencyRead) != residencyRead {
		r.log.Info("backend serves /slots; its residency is read from it", "backend", m.name)
	}
	r.changed()
}

// agree makes the registry's residency of one idle slot agree with what
// the backend says it holds (see above).
func (r *Router) agree(m *member, c engine.SlotContent) {
	loc := kvcache.Location{Backend: m.name, Slot: c.ID}
	believed := r.reg.Held(loc)
	learned := m.slotState(c.ID)
	if c.Tokens != nil && len(c.Tokens) == 0 {
		c.Count = 0 // an empty prompt: an empty slot, whoever can key it
	}
	if len(c.Tokens) > 0 && m.exact {
		tenant := learned.tenant
		if tenant == "" {
			tenant = r.cfg.SoleTenant
		}
		if tenant != "" {
			chain := r.exact.ForTenant(tenant).Tokens(c.Tokens)
			n := kvcache.SharedPrefix(believed, chain.Keys)
			switch {
			case n == len(chain.Keys):
				return // held: that prompt and perhaps its answer
			case n == len(believed):
				_ = r.reg.Record(loc, chain) // holds more than the registry knew
				return
			case learned.tenant == "" || r.cfg.SoleTenant != "":
				// Another prompt than the router's last turn left: the
				// one tenant's, or, unattributed, nobody's.
				_ = r.reg.Record(loc, chain)
				m.forgetSlot(c.ID)
				return
			}
		}
		if len(believed) > 0 {
			r.log.Info("backend slot holds a prompt the gateway did not send there; forgotten", "backend", m.name, "slot", c.ID)
		}
		_ = r.reg.Release(loc)
		m.forgetSlot(c.ID)
		return
	}
	if c.Count < 0 {
		return
	}
	block := r.cfg.BlockTokens
	if c.Count < len(believed)*block || learned.count >= 0 && len(believed) > 0 && (c.Count < learned.count-2 || c.Count > learned.count+2) {
		r.log.Info("backend slot was emptied or given to another prompt; its residency is dropped",
			"backend", m.name, "slot", c.ID, "slot_tokens", c.Count, "believed_tokens", len(believed)*block)
		_ = r.reg.Release(loc)
		m.forgetSlot(c.ID)
	}
}

// disagrees reports whether a turn's reported reuse (cached units of
// chain) is less than what the registry believed loc held of it
// (believed): the slot lost what the registry thought it had.
func disagrees(believed []kvcache.Key, chain kvcache.Chain, cached int) bool {
	if chain.BlockSize <= 0 {
		return false
	}
	return cached/chain.BlockSize < kvcache.SharedPrefix(believed, chain.Keys)
}
