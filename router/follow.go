package router

import (
	"context"
	"errors"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Residency from the nodes.
//
// A kvwin node publishes what its slots hold as a journal
// (kvcache.Journal, GET /kvwin/v1/events); the router follows the journal
// of every backend that has one (engine.ResidencyFollower), one goroutine
// per backend owned by the router's context, reconnecting with the health
// checks' backoff. So every gateway replica holds the node's own view of
// its slots, whichever replica's turns put them there, and no replica
// coordinates with another (docs/fleet.md, "Residency from the nodes").
//
//   - Each event's slot is keyed here, from its token ids, as the tenant
//     the node says holds it: the gateway's keys are its own (its
//     namespace, its tenant salts), never the node's. Only what the event
//     changed is hashed: the blocks it kept keep the keys they got
//     (slotKeys). A node that keeps tenants apart under the gateway's
//     names (Info.Tenants) is believed as it says; one that does not is
//     believed on a gateway of one tenant (Config.SoleTenant), and
//     otherwise only where the slot holds what this router's own last
//     turn there left, cut back or extended.
//     A slot another replica filled then belongs to nobody this router
//     knows, and holds nothing here.
//   - What the router learns from its own turns (Correct, then Record)
//     still applies between events: the node's next event about that slot
//     then replaces it.
//   - A gap (a lost event, a node restarted under another epoch) makes the
//     follower resubscribe from the last event it applied: the node replays
//     what was missed, or sends a snapshot that replaces the whole view.
//   - While a backend's journal is followed, its /slots are not polled
//     (BackendStatus.Residency says "events"); when the stream is down,
//     polling resumes until it is back. A backend that publishes no journal
//     (llama-server, an older node) is polled as before.
//   - The node's load (requests running and waiting) counts as the
//     backend's load where it is more than this router's own turns there:
//     every replica balances on the whole fleet's traffic. A node's answer
//     says where its journal stood at the turn's end (kvwin_journal):
//     events before that say the load before the end and are not taken
//     as the load now (member.loadReported).

// ResidencyEvents: the backend's residency is its own journal, followed.
const ResidencyEvents = "events"

// follow follows m's journal until ctx ends or m publishes none.
func (r *Router) follow(ctx context.Context, m *member) {
	defer r.done.Done()
	mirror := kvcache.NewMirror()
	keyed := slotKeys{}
	backoff := time.Duration(0)
	for {
		err := m.follower.FollowResidency(ctx, mirror.Cursor(), func(ev kvcache.JournalEvent) error {
			changed, err := mirror.Apply(ev)
			if err != nil {
				return err
			}
			kept := 0 // tokens of the event's slot it left as they were
			switch ev.Type {
			case kvcache.EventSnapshot:
				clear(keyed)
			case kvcache.EventStored, kvcache.EventRemoved:
				kept = ev.FromBlock * mirror.BlockTokens()
			}
			r.applyResidency(m, mirror, changed, ev.Type == kvcache.EventSnapshot, keyed, kept)
			r.applySaved(m, mirror)
			backoff = 0
			return nil
		})
		m.following.Store(false)
		m.remoteReported(0)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, engine.ErrNotSupported) {
			r.log.Info("backend publishes no slot journal; its residency is read from /slots or learned from turns", "backend", m.name, "err", err)
			return
		}
		if errors.Is(err, kvcache.ErrJournalGap) {
			r.log.Info("backend's slot journal has a gap; resubscribing", "backend", m.name, "err", err)
			continue // at once: the node replays or sends a snapshot
		}
		r.log.Debug("backend's slot journal not followed; reconnecting", "backend", m.name, "err", err, "backoff", backoff)
		backoff = min(max(2*backoff, r.cfg.HealthInterval/2), r.cfg.HealthMaxBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// applyResidency makes the registry hold, for each slot of changed, what
// mirror says m's slot holds (see above); snapshot says the mirror was
// just replaced whole. keyed holds the keys of what each slot held before
// (slotKeys), of which the first kept tokens of a changed slot are still
// held.
func (r *Router) applyResidency(m *member, mirror *kvcache.Mirror, changed []int, snapshot bool, keyed slotKeys, kept int) {
	m.resMu.Lock()
	for _, s := range changed {
		if n := int(m.slots.Load()); n > 0 && s >= n {
			delete(keyed, s)
			continue // not a slot the backend says it has
		}
		loc := kvcache.Location{Backend: m.name, Slot: s}
		st := mirror.Slot(s)
		chain, ok := r.residentChain(m, loc, st, keyed, kept)
		if len(st.Tokens) == 0 || !ok {
			_ = r.reg.Release(loc)
			continue
		}
		_ = r.reg.Record(loc, chain)
	}
	l := mirror.Load()
	m.loadReported(l.Running+l.Waiting, mirror.Cursor())
	if snapshot && !m.following.Swap(true) {
		r.log.Info("backend publishes its slot journal; its residency is followed", "backend", m.name)
	}
	m.resMu.Unlock()
	if len(changed) > 0 || snapshot {
		r.changed()
	}
}

// residentChain keys what slot loc of m holds (st) as the router's
// lookups will ask for it, and reports whether the router can tell whose
// it is (see above). A node that does not keep tenants apart, on a gateway
// of several, is believed where its slot holds what the router's own last
// turn there left, or a prefix or an extension of it: the same
// conversation, one turn on or cut back.
func (r *Router) residentChain(m *member, loc kvcache.Location, st kvcache.SlotTokens, keyed slotKeys, kept int) (kvcache.Chain, bool) {
	switch {
	case r.cfg.SoleTenant != "":
		return keyed.chain(r.exact, loc.Slot, r.cfg.SoleTenant, st.Tokens, kept), true
	case m.backend.Info().Tenants:
		return keyed.chain(r.exact, loc.Slot, st.Tenant, st.Tokens, kept), true
	}
	chain := keyed.chain(r.exact, loc.Slot, m.slotState(loc.Slot).tenant, st.Tokens, kept)
	believed := r.reg.Held(loc)
	n := kvcache.SharedPrefix(believed, chain.Keys)
	return chain, len(believed) > 0 && n > 0 && (n == len(believed) || n == len(chain.Keys))
}

// slotKeys is, per slot of a followed node, the keys its tokens got last
// (the tenant keyed as, and the chain): an event keeps a slot's first
// blocks and changes its last ones, so keying only what follows the kept
// ones costs a turn what it added, not the conversation (at 7,000 tokens,
// a whole slot was hashed again at every event). Owned by the follower.
type slotKeys map[int]keyedSlot

type keyedSlot struct {
	tenant string
	keys   []kvcache.Key
}

// chain keys tokens, what slot holds now, as tenant's under keyer, of
// which the first kept tokens are as they were when the slot was keyed
// last (as the same tenant: another's keys share nothing).
func (k slotKeys) chain(keyer *kvcache.Keyer, slot int, tenant string, tokens []int, kept int) kvcache.Chain {
	var known []kvcache.Key
	if prior, ok := k[slot]; ok && prior.tenant == tenant {
		known = prior.keys[:min(len(prior.keys), kept/keyer.BlockTokens(), len(tokens)/keyer.BlockTokens())]
	}
	c := keyer.ForTenant(tenant).TokensAfter(known, tokens)
	k[slot] = keyedSlot{tenant: tenant, keys: c.Keys}
	return c
}
