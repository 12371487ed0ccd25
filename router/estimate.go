package router

import (
	"maps"
	"slices"
	"sync"
	"time"

	"kvwin/attention"
	"kvwin/kvcache"
)

// candidate is one backend as one turn sees it: what the registry says it
// holds of the prompt and what the turn would cost there. The estimate is
// the same whatever the policy (Observe reports it for every policy); a
// scorer (policy.go) ranks the candidates and says which slot it would
// run the turn on.
type candidate struct {
	index       int
	m           *member
	name        string
	load        int           // requests in flight
	slots       int           // parallel slots
	cached      int           // prompt tokens it holds (registry, or the planned slot's reuse)
	tenantUnits int           // units (tokens, or bytes of text) of the prompt the registry says it holds for the request's tenant
	promptUnits int           // units of the whole prompt, in the same chain (exact, or approximate as the match)
	holdingSlot int           // slot the registry says holds them; -1 unknown
	hasPlan     bool          // plan is the router's plan for a backend whose slots reuse only their own KV (placement.go)
	plan        int           // the planned slot; -1 every slot is busy
	isolated    bool          // the router isolates tenants on it: the tenant pin chooses the slot (tenancy.go)
	predicted   time.Duration // predicted time to first token
	prefill     time.Duration // of it, the turn's own prefill
	extra       time.Duration // of it, the time of what the turn destroys there (placement.go): a cost, not a wait
	slack       time.Duration // predicted time of TieTokens tokens: differences below it are ties
	prefer      int           // the slot the scorer would run the turn on; -1 none (the backend, or the tenant pin, chooses)
	matched     int           // prompt tokens the registry says it holds anywhere (before any slot plan)
	matchedTier string        // where matched is held: "slot", or a snapshot's medium ("ram", "disk"); "" nowhere
	matchedSlot int           // of the prompt, tokens a live slot holds (before any slot plan)
	cells       int           // KV cells of all its slots (slots × context per slot); 0 unknown
	peak        float64       // its cold prefill throughput over a chunk of peakChunk tokens, tokens/s (Candidate.PeakPrefill)
}

// estimate predicts each backend's time to first token for the prompt k.
func (r *Router) estimate(k key, live []*member) []candidate {
	matches, saved, inSlot := r.bestMatches(k)
	peer := borrowedCost(live)
	// Backends whose slots reuse only their own KV: each idle slot's hold,
	// and whether any slot of them is free (placement.go). Kvwin nodes
	// not planned yet are planned while one of their slots is empty
	// (plansEarly).
	plans := map[int][]slotPlan{}
	early := map[int][]slotPlan{}
	room, empty := false, false
	for _, m := range live {
		switch {
		case len(k.exact.Keys) == 0:
		case r.plansSlots(m):
			plans[m.index] = r.slotPlans(m, k.exact, k.length, k.owner)
			room = room || hasRoom(plans[m.index])
		case r.plansEarly(m):
			early[m.index] = r.slotPlans(m, k.exact, k.length, k.owner)
			empty = empty || slices.ContainsFunc(early[m.index], func(p slotPlan) bool { return p.heldTokens == 0 })
		}
	}
	if empty {
		maps.Copy(plans, early)
		room = true
	}
	// Read only where a node publishes snapshots (saved.go, Claims): a
	// fleet without them pays no scan of the prompt's keys.
	home := sync.OnceValue(func() int { return r.homeMatch(k, matches) })
	cands := make([]candidate, 0, len(live))
	for _, m := range live {
		var cost attention.Predictor = m.cal
		if peer != nil && !m.cal.Stats().Fitted {
			cost = peer
		}
		c := candidate{index: m.index, m: m, name: m.name, load: m.inflight(), slots: m.slotCount(), holdingSlot: -1, plan: -1, prefer: -1,
			isolated: r.isolates(m), cells: m.slotCount() * int(m.ctx.Load())}
		mt, ok := matches[m.name]
		ok = ok && mt.Approximate != m.exact
		if ok {
			c.cached = min(mt.Length, k.length-1)
			c.tenantUnits, c.promptUnits = mt.Length, k.exact.Length
			if mt.Approximate {
				c.promptUnits = k.approx.Length
			}
			if mt.Tier == kvcache.TierSlot {
				c.holdingSlot = mt.Slot
			}
			c.matched = c.cached
			c.matchedTier, c.matchedSlot = "slot", c.cached
			if mt.Tier == kvcache.TierSnapshot {
				c.matchedTier, c.matchedSlot = m.saved.of(mt.Snapshot).String(), min(inSlot[m.name], c.cached)
			}
		}
		extra := time.Duration(0)
		if plans, ok := plans[m.index]; ok {
			// Its slots reuse only their own KV: the slot the turn would
			// take, and what taking it destroys (placement.go).
			best := 0
			if ok {
				best = mt.Length
			}
			switch {
			case m.backend.Info().SharesPrefixes:
				plans = seeded(plans, best, k.length)
			case m.restores.Load():
				lost := 0
				if sn, ok := saved[m.name]; ok {
					lost = r.loadLoses(k.exact, sn, room)
				}
				plans = restorable(plans, best, k.length, lost)
			}
			p := bestPlan(plans, k.length, room)
			c.cached, c.plan, c.hasPlan = p.reuse, p.slot, true
			if d := p.destroyed(room); d > 0 {
				extra = destroyedTime(m, p, d, cost) // saved.go
			}
			if m.saved.publishes() && !(ok && home() >= 0 && mt.Length >= home()) {
				extra += r.claimedTime(m, plans, p, room, cost) // saved.go, Claims
			}
		}
		c.prefill = cost.Predict(max(k.length-c.cached, 1), c.cached)
		if ok && mt.Tier == kvcache.TierSnapshot {
			c.prefill += restoreTime(m, mt.Snapshot, min(c.cached, mt.Length), cost) // saved.go
		}
		c.predicted = m.wait() + c.prefill + extra
		c.extra = extra
		c.slack = cost.Predict(r.cfg.TieTokens, 0)
		if t := cost.Predict(peakChunk, 0); t > 0 {
			c.peak = peakChunk / t.Seconds()
		}
		cands = append(cands, c)
	}
	return cands
}

// bestMatches is each backend's best match of the prompt k in the registry, by
// backend name: exact or approximate, whichever holds more blocks; of
// its exact snapshots the one a prompt cache would load (kvcache.Result's
// Keeps); and the units its best live slot holds (inSlot).
func (r *Router) bestMatches(k key) (matches map[string]kvcache.Match, saved map[string]kvcache.Kept, inSlot map[string]int) {
	matches, saved, inSlot = map[string]kvcache.Match{}, map[string]kvcache.Kept{}, map[string]int{}
	for _, chain := range []kvcache.Chain{k.exact, k.approx} {
		if len(chain.Keys) == 0 {
			continue
		}
		res := r.reg.Lookup(chain)
		for _, mt := range res.Matches {
			if cur, ok := matches[mt.Backend]; !ok || mt.Blocks > cur.Blocks {
				matches[mt.Backend] = mt
			}
			if mt.Tier == kvcache.TierSlot && !mt.Approximate {
				inSlot[mt.Backend] = max(inSlot[mt.Backend], mt.Length)
			}
		}
		if !chain.Approximate {
			for _, kp := range res.Keeps {
				saved[kp.Backend] = kp
			}
		}
	}
	return matches, saved, inSlot
}

// borrowedCost is the cost model a backend that has not measured itself
// yet borrows: that of the peer that has measured most (same model, likely
// the same speed); nil if none has. Its prior alone would make it look
// slower or faster than its measured peers, and a router that never sends
// it a turn would never learn.
func borrowedCost(live []*member) attention.Predictor {
	var peer attention.Predictor
	most := 0
	for _, m := range live {
		if st := m.cal.Stats(); st.Fitted && st.Observations > most {
			peer, most = m.cal, st.Observations
		}
	}
	return peer
}
