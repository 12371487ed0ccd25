package router

import (
	"context"
	"fmt"

	"kvwin/engine"
)

// Tenants on backends that do not keep them apart.
//
// A llama-server (or a kvwin node that does not trust the gateway's key)
// reuses whatever prefix the slot it runs a request on holds, whoever
// computed it. The cached tokens a tenant is told are capped at its own
// registry prefix (usage.go), but the time to first token would still tell
// tenant B that tenant A sent the same prefix. With Config.IsolateTenants,
// a turn on such a backend that runs requests on the slot they name
// (engine.SlotPinner) is pinned to one slot, and sent with NoCache
// (cache_prompt false: the whole prompt is computed again) unless that slot
// holds, as far as the router knows, only KV its own tenant computed.
//
// The router knows a slot's owner because every turn it sends there is
// pinned: the slot then holds the last tenant the router ran on it. It
// knows nothing of a slot it has not used since it started or since the
// backend rejoined (perhaps restarted), nor of requests others send the
// backend directly: such a slot is "unknown", treated as another tenant's.
// A turn whose slot the router could not keep (it failed, or the backend
// ran it elsewhere) leaves the slot unknown too.
//
// Slot choice, in order: the idle slot of the tenant's own that the
// registry says holds more than a tenth of the prompt (llama-server's own
// --slot-prompt-similarity default); else an idle unknown slot (likely
// empty); else the tenant's own idle slot used longest ago; else another
// tenant's idle slot used longest ago; else, all busy, the slot with the
// fewest turns on it (the backend queues the turn for it). So a tenant
// keeps its own prefixes, fills empty slots before evicting anyone, and a
// single tenant reuses as before, once each slot has served it.
//
// Turns sent to one slot may reach the backend in another order than they
// were claimed in (each renders and tokenizes on its own goroutine first).
// So while a turn that may reuse a slot is on its way, no other tenant's
// turn is sent to that slot: it could run first and leave its KV to be
// reused. A turn finding every slot so held waits for one to be settled.
//
// Invariants of a member's owners table (under ownMu):
//  1. len(owners) is the slot count last claimed against; a shrunk backend's
//     extra slots are dropped, a grown one's new slots are unknown.
//  2. owners[s].tenant == "" means unknown.
//  3. owners[s].busy counts the router's turns sent to slot s and not yet
//     settled; a claim reuses only an idle slot's KV (what a turn ahead
//     leaves there is not known until it ends).
//  4. owners[s].reusing counts the unsettled turns that may reuse slot s;
//     while it is > 0, no turn of a tenant other than owners[s].tenant is
//     claimed on s (and none at all once the slot was forgotten).
//  5. freed is closed, and replaced, whenever a claim is settled.

// slotOwner is what the router knows of one slot of an isolating member.
type slotOwner struct {
	tenant  string // whose KV the slot holds; "" unknown
	busy    int    // turns claimed and not settled
	reusing int    // of them, turns sent with the slot's KV to reuse
	used    uint64 // sequence number of the last claim; 0 never
}

// pin is one claim: the slot a turn of tenant runs on and whether it may
// reuse the slot's KV.
type pin struct {
	tenant string
	slot   int
	reuse  bool
}

// similarity is the share of the prompt a slot of the tenant's own must
// hold to be chosen for it (llama-server's --slot-prompt-similarity default).
const similarity = 0.1

// isolates reports whether turns on m are pinned and their reuse decided by
// the router: the gateway isolates tenants, m does not itself, and m runs a
// request on the slot it names.
func (r *Router) isolates(m *member) bool {
	if !r.cfg.IsolateTenants || m.backend.Info().Tenants {
		return false
	}
	p, ok := engine.As[engine.SlotPinner](m.backend)
	return ok && p.PinsSlots()
}

// claim chooses the slot a turn of tenant runs on (see the file comment):
// asked is the client's own pin (-1 none), holdingSlot the slot the registry says
// holds cached tokens of the prompt's length tokens (-1 none). It blocks
// while no slot may take the turn, until one is settled or ctx ends. The
// caller settles the claim.
func (m *member) claim(ctx context.Context, tenant string, asked, holdingSlot, cached, length int) (pin, error) {
	for {
		m.ownMu.Lock()
		if p, ok := m.tryClaim(tenant, asked, holdingSlot, cached, length); ok {
			m.ownMu.Unlock()
			return p, nil
		}
		freed := m.freed
		m.ownMu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return pin{}, fmt.Errorf("waiting for a slot no other tenant's turn may reuse: %w", ctx.Err())
		}
	}
}

// tryClaim is claim without waiting: ok is false when every slot has a
// turn of another tenant on its way that may reuse it. ownMu is held.
func (m *member) tryClaim(tenant string, asked, holdingSlot, cached, length int) (pin, bool) {
	m.resize(m.slotCount())
	if m.freed == nil {
		m.freed = make(chan struct{})
	}
	open := func(s int) bool { return m.owners[s].reusing == 0 || m.owners[s].tenant == tenant }
	tenantIdle := func(s int) bool { return m.owners[s].tenant == tenant && m.owners[s].busy == 0 }
	slot := -1
	switch {
	case asked >= 0 && asked < len(m.owners):
		if !open(asked) {
			return pin{}, false
		}
		slot = asked
	case holdingSlot >= 0 && holdingSlot < len(m.owners) && tenantIdle(holdingSlot) && float64(cached) > similarity*float64(length):
		slot = holdingSlot
	default:
		if slot = m.pick(tenant, open); slot < 0 {
			return pin{}, false
		}
	}
	o := &m.owners[slot]
	p := pin{tenant: tenant, slot: slot, reuse: o.tenant == tenant && o.busy == 0}
	m.seq++
	o.tenant, o.used = tenant, m.seq
	o.busy++
	if p.reuse {
		o.reusing++
	}
	return p, true
}

// pick is the slot for a turn of tenant with no slot of its own to go to,
// among those open to it; -1 if none is. ownMu is held.
func (m *member) pick(tenant string, open func(int) bool) int {
	rank := func(o slotOwner) int {
		switch {
		case o.busy > 0:
			return 3
		case o.tenant == "":
			return 0
		case o.tenant == tenant:
			return 1
		default:
			return 2
		}
	}
	best := -1
	for s := range m.owners {
		if !open(s) {
			continue
		}
		if best < 0 {
			best = s
			continue
		}
		o, b := m.owners[s], m.owners[best]
		switch rs, rb := rank(o), rank(b); {
		case rs != rb:
			if rs < rb {
				best = s
			}
		case rs == 3 && o.busy != b.busy:
			if o.busy < b.busy {
				best = s
			}
		case o.used < b.used:
			best = s
		}
	}
	return best
}

// settle ends claim p: ran is the slot the backend reports it ran on (-1
// unknown), ok whether the turn succeeded. A slot whose content the router
// cannot vouch for is left unknown.
func (m *member) settle(p pin, ran int, ok bool) {
	m.ownMu.Lock()
	defer m.ownMu.Unlock()
	if p.slot >= 0 && p.slot < len(m.owners) {
		o := &m.owners[p.slot]
		o.busy = max(o.busy-1, 0)
		if p.reuse {
			o.reusing = max(o.reusing-1, 0)
		}
		if (!ok || ran != p.slot) && o.tenant == p.tenant {
			o.tenant = ""
		}
	}
	if ok && ran != p.slot && ran >= 0 && ran < len(m.owners) && m.owners[ran].busy == 0 {
		// The backend ran it elsewhere: that slot now holds this turn.
		m.owners[ran].tenant = p.tenant
	}
	if m.freed != nil {
		close(m.freed)
	}
	m.freed = make(chan struct{})
}

// forgetOwners marks slots from on unknown: the backend rejoined (perhaps
// restarted) or changed.
func (m *member) forgetOwners(from int) {
	m.ownMu.Lock()
	defer m.ownMu.Unlock()
	for s := max(from, 0); s < len(m.owners); s++ {
		m.owners[s].tenant = ""
	}
}

// resize makes the table n slots long. ownMu is held.
func (m *member) resize(n int) {
	for len(m.owners) < n {
		m.owners = append(m.owners, slotOwner{})
	}
	m.owners = m.owners[:n]
}
