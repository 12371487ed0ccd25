package router

import (
	"sync"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Placement on backends whose slots reuse only their own KV.
//
// A kvwin node copies a prefix one slot holds into another slot
// (engine.Info.SharesPrefixes), so where a turn runs costs only what the
// backend holds of it: the registry's best match. A llama-server cannot: a
// slot reuses the longest common prefix of what it itself holds, and a
// request run on a slot overwrites everything there past that prefix. On
// such a backend the cost of a slot includes what it destroys:
//
//	cost(slot) = (prompt − reuse) + destroyed
//
// where reuse is the prefix of the prompt the slot holds (registry). A slot
// holding another conversation's longer chain is worth its reuse to that
// conversation too, and what that is depends on where it can go next:
//
//   - While some slot of the fleet is free (holds nothing, or a prefix of
//     this prompt), the conversation evicted here would compute its whole
//     chain again, in a free slot or by evicting this one back: destroyed
//     is all the slot holds. So a new conversation takes a free slot, and
//     two conversations sharing a system prompt do not take turns in one
//     slot, recomputing each other's suffix every turn, while slots stand
//     empty.
//   - Once none is, every placement evicts someone: destroyed is the suffix
//     beyond what the prompt shares with the slot, counted twice (its owner
//     computes it again, and coming back evicts this one), and the least
//     valuable slot is taken; the shared prefix wins where it outweighs
//     that suffix.
//   - Once the router knows how conversations come back (liveness.go),
//     what a slot's chain is worth is all of it times the chance it is
//     continued, free or not: its owner, evicted, computes all of it again
//     somewhere; and a slot whose chain is very likely abandoned counts as
//     free. While some slot is free the chance is by the chain's depth and
//     idle time: the question is which chains have ended, and the depth
//     tells a short live conversation from a long ended one. Once none is,
//     every placement evicts a live chain, and the chance is by idle time
//     alone: weighed by depth there, evictions fall on the longest chains,
//     whose owners come back to the most expensive recomputes (bench
//     fleet, 64 × 4 nodes at load 0.6: TTFT p90 788 against 952 ms on
//     llama-server nodes, 883 against 1,048 on kvwin nodes).
//
// Branches. A turn whose prompt is a branch of the chain a slot holds (a
// retry, a regenerate, an edit of the last message: the same conversation
// asked again from a point of its last turn) overwrites only that chain's
// tail, and the chain's owner is the turn itself: taking the slot destroys
// the tail, once, weighed by the chance the chain is continued (whole while
// the router knows nothing of liveness), never the whole chain as for a
// sibling's. liveness.go tells a branch from a sibling by what the prompt
// shares with the chain: for a chain of one turn, every block of that
// turn's prompt, and its length (a sibling sharing its blocks, then
// going on, is no branch, unless the client names the conversation and it
// is the one that left the chain: then it is its own next turn with an
// answer the client replaced); else every block before its last turn (up
// to the tip that turn continued, which holds the conversation's own
// answers). A sibling shares only the system prompt.
// Counted whole, a repeated request went to another backend while slots
// stood free and computed its whole prompt (1,419 tokens over three real
// llama-servers, 1 token where it was); it now leaves its slot only when
// the predicted time to first token, what it destroys included, is sooner
// elsewhere (a queue ahead of it there longer than its prefill).
//
// The backend's score is its best slot's, and the turn is pinned to that
// slot (id_slot): llama-server's own choice, unpinned, would give a
// newcomer the slot whose prompt it shares most (--slot-prompt-similarity),
// which is exactly a sibling's. Slots the router has a turn running on are
// not planned for; with all of them busy the turn is not pinned, and the
// server runs it on the first slot that frees.
//
// A backend that reports reusing more of a prompt than the slot it ran on
// held (llama-server's host-memory prompt cache, --cache-ram) restores
// what its slots give up, on its own terms (restorable): only a slot that
// would keep less than half of what it holds is swapped with the cache,
// pinned or not; its chain is saved, and the cached prompt best matching
// the new one is loaded into it and leaves the cache. So from then on the
// chains its slots give up count as held there (the registry's snapshot
// tier, as a kvwin node's); taking a swapped slot destroys nothing of its
// own, but loads, for a turn whose own chain the cache does not hold,
// another conversation's that shares its system prompt, which the turn
// then overwrites (that chain's suffix, weighed by its liveness); a slot
// kept (half or more shared) loses its suffix as without the cache; and
// an empty slot loads nothing. What the server loaded the router forgets;
// a swap that found less than the router expected means the server's
// cache no longer held that chain, nor (it drops the oldest first) any
// saved before it (member.swapped). bench fleet --cache-ram 8192, 64 × 4
// llama-server nodes at load 0.2: 1.50× the oracle's prefill and TTFT p90
// 92 ms, against 2.79× and 540 ms when every slot taken counted as saved
// and every empty slot as loading (docs/benchmarks.md).
//
// A slot the registry says holds nothing counts as free. The registry
// learns what each turn reused from the backend's own counts, so a slot
// emptied behind the router's back (a restart, the server's prompt cache
// swapping it) is corrected by the first turn that finds it so.

// evictWeight is how many times an evicted suffix counts once no slot is
// free: once for its conversation, which must compute it again, once for
// the turn in which it comes back and evicts this one.
const evictWeight = 2

// slotPlan is the slot a turn would take on a backend that reuses only a
// slot's own KV.
type slotPlan struct {
	slot       int // -1: every slot is busy
	slotReuse  int // prompt tokens the slot itself holds
	reuse      int // prompt tokens the turn would reuse there: slotReuse, or what a prompt cache loads
	heldTokens int // tokens the slot holds
	evicted    int // of them, beyond reuse: overwritten by the turn
	// stale is 1 − the chance its chain is continued, by its depth and
	// idle time (liveness.go); staleIdle by its idle time alone. What
	// evicting it destroys counts (1 − stale) times while some slot is
	// free, (1 − staleIdle) times once none is. 0: counts whole.
	stale, staleIdle float64
	weighed          bool
	// branch: the prompt is a branch of the slot's own chain (a retry, a
	// regenerate, an edit of its last message; liveness.go, heldChain): taking
	// the slot destroys only the tail it overwrites.
	branch bool
	// lost is another conversation's tokens the turn destroys besides the
	// slot's own, weighed by the chance its chain is continued: a prompt
	// cache's entry loaded into the slot and overwritten (restorable).
	lost int
}

// destroyed is what taking the slot costs other conversations (see the
// file comment): room says some slot of the fleet is free.
func (p slotPlan) destroyed(room bool) int {
	live := 1 - p.stale
	if !room {
		live = 1 - p.staleIdle
	}
	switch {
	case p.evicted == 0:
		return p.lost
	case p.branch:
		return p.lost + int(live*float64(p.evicted))
	case room || p.weighed:
		return p.lost + int(live*float64(p.heldTokens))
	default:
		return p.lost + int(live*float64(evictWeight*p.evicted))
	}
}

// cost is the plan's cost in tokens.
func (p slotPlan) cost(length int, room bool) int { return length - p.reuse + p.destroyed(room) }

// plansSlots reports whether the router plans m's slots itself: m keys
// exactly (its prompt tokens are the router's), runs a request on the slot
// it names, and is not a backend the router isolates tenants on
// (tenancy.go claims those slots).
//
// A backend that seeds one slot from another (a kvwin node) is planned
// too once the router's liveness weighs chains (liveness.go): the turn
// reuses the best prefix the backend holds in any slot, but the slot it
// takes still loses what it held past the prompt, and the node's own
// choice (the least recently used idle slot) cannot know which of its
// slots' conversations will come back. Before, the node chooses (but see
// plansEarly): counting every chain whole, as a plan must then, would keep
// a conversation off the slot of one that has ended, and recompute its
// shared prefix on a node that does not hold it.
func (r *Router) plansSlots(m *member) bool {
	if !r.canPlan(m) {
		return false
	}
	return !m.backend.Info().SharesPrefixes || r.liveness.trusted(r.cfg.Now())
}

// plansEarly reports whether m is a backend that seeds one slot from
// another and keeps no snapshots, whose slots the router does not plan
// yet (plansSlots: its liveness does not weigh chains). Such backends are
// planned for a turn all the same while one of their slots holds nothing
// (estimate): an empty slot destroys nothing, so the choice between it
// and a chain whose owner may be thinking needs no liveness, and the
// node's own choice, the least recently used idle slot, takes the chain
// while empty slots wait elsewhere. That is how a fleet starts: bench
// fleet, 64 kvwin nodes × 4 slots at load 0.2, evicted the chains of
// 2,014 returning turns in its first 20 simulated minutes, 431 with this
// rule; three real nodes of two slots (the simulator's validation test)
// computed 7,466 prefill tokens, 10,735 before (docs/benchmarks.md). A
// node that keeps snapshots saves what a slot gives up and restores it
// when its conversation comes back, so its own choice destroys nothing:
// left to it, bench route's three nodes compute 5,434 tokens (the
// oracle 5,425), and 8,706 planned while a slot is empty, each newcomer
// kept off a sibling's slot and computing its system prompt again.
func (r *Router) plansEarly(m *member) bool {
	return r.canPlan(m) && m.backend.Info().SharesPrefixes && !m.snapshots && !r.liveness.trusted(r.cfg.Now())
}

// canPlan reports whether m's slots can be planned at all: it keys
// exactly, runs a request on the slot it names, and the router does not
// isolate tenants on it.
func (r *Router) canPlan(m *member) bool {
	if !m.exact || r.isolates(m) {
		return false
	}
	p, ok := engine.As[engine.SlotPinner](m.backend)
	return ok && p.PinsSlots()
}

// slotPlans lists the idle slots of m and what a prompt of chain (length
// tokens) would find in each.
func (r *Router) slotPlans(m *member, chain kvcache.Chain, length int, owner uint64) []slotPlan {
	var out []slotPlan
	now := r.cfg.Now()
	for s := range m.slotCount() {
		if m.running(s) {
			continue
		}
		loc := kvcache.Location{Backend: m.name, Slot: s}
		heldBlocks, shared := r.reg.Overlap(loc, chain.Keys)
		reuse := min(chain.Units(shared), max(length-1, 0))
		w, known := r.liveness.weight(loc, now)
		out = append(out, slotPlan{slot: s, slotReuse: reuse, reuse: reuse,
			heldTokens: chain.Units(heldBlocks), evicted: chain.Units(heldBlocks - shared), stale: 1 - w.byDepth, staleIdle: 1 - w.byIdle, weighed: known,
			branch: shared < heldBlocks && r.liveness.branches(loc, shared, chain.Length, owner)})
	}
	return out
}

// bestPlan is the plan of least cost, ties to the slot holding more of the
// prompt itself, then to the lowest slot; slot -1 if plans is empty.
func bestPlan(plans []slotPlan, length int, room bool) slotPlan {
	best := slotPlan{slot: -1}
	for _, p := range plans {
		c, b := p.cost(length, room), best.cost(length, room)
		if best.slot < 0 || c < b || c == b && p.slotReuse > best.slotReuse {
			best = p
		}
	}
	return best
}

// seeded is plans on a backend that seeds a slot from another (a kvwin
// node): every slot reuses the best prefix the backend holds anywhere
// (best, of a prompt of length tokens), and loses what it held beyond its
// own share of the prompt.
func seeded(plans []slotPlan, best, length int) []slotPlan {
	out := make([]slotPlan, len(plans))
	for i, p := range plans {
		p.reuse = max(p.reuse, min(best, length-1))
		out[i] = p
	}
	return out
}

// restorable is plans on a backend that restores what its slots give up
// (a prompt cache) for a prompt of length tokens, best of which the
// backend holds anywhere. A slot that would keep less than half of what
// it holds is swapped with the prompt cache (llama-server, pinned or
// not): what it held is saved, so taking it destroys nothing of its own,
// and the best held prompt is loaded; where that is another
// conversation's (sharing only a system prompt with this one), the turn
// overwrites what it held past the shared prefix: lost, weighed by its
// chance of being continued (loadLoses). The plan takes the best the
// backend holds anywhere, a slot's too, though the server loads only
// from its cache: taking only what the cache would load (Keeps) measured
// worse (bench fleet --cache-ram 8192: TTFT p90 1,092 against 940 ms at
// load 0.6, 1,304 against 1,048 at 1.0). A slot keeping half or more is
// not touched: the turn overwrites its suffix, lost as on a backend
// without the cache. An empty slot loads nothing (its share kept is 0/0,
// which no cached prompt's beats: llama.cpp #28139).
func restorable(plans []slotPlan, best, length, lost int) []slotPlan {
	out := make([]slotPlan, len(plans))
	for i, p := range plans {
		if 2*p.slotReuse < p.heldTokens {
			p.reuse = max(p.reuse, min(best, length-1))
			p.evicted, p.lost = 0, lost
		}
		out[i] = p
	}
	return out
}

// loadLoses is what a slot swapped with its backend's prompt cache destroys
// (restorable) for a prompt of chain, sn being the saved prompt the cache
// would load (kvcache.Result's Keeps: the one keeping the largest share
// of itself, as llama-server chooses): its blocks past the prompt's, if it
// goes on beyond them (another conversation's), weighed by the chance its
// chain is continued (liveness.go; by idle time alone once no slot is
// free, as a slot's).
func (r *Router) loadLoses(chain kvcache.Chain, sn kvcache.Kept, room bool) int {
	if sn.Held <= sn.Blocks {
		return 0
	}
	tip, ok := snapshotTip(sn.Snapshot)
	if !ok {
		return 0
	}
	w, _ := r.liveness.tipWeight(tip, r.cfg.Now())
	live := w.byDepth
	if !room {
		live = w.byIdle
	}
	return int(live * float64((sn.Held-sn.Blocks)*chain.BlockSize))
}

// hasRoom reports whether some plan evicts nothing, or only a chain very
// likely abandoned (liveness.go).
func hasRoom(plans []slotPlan) bool {
	for _, p := range plans {
		if p.evicted == 0 || 1-p.stale < abandoned {
			return true
		}
	}
	return false
}

// slotRuns counts the router's turns running on each slot of a backend it
// plans slots for; planSlot leaves those slots out.
type slotRuns struct {
	mu  sync.Mutex
	ran map[int]int
}

// running reports whether a turn of the router's runs on slot s of m.
func (m *member) running(s int) bool {
	m.runs.mu.Lock()
	defer m.runs.mu.Unlock()
	return m.runs.ran[s] > 0
}

// startRun counts a turn pinned to slot s of m until the returned func is
// called.
func (m *member) startRun(s int) func() {
	m.runs.mu.Lock()
	defer m.runs.mu.Unlock()
	if m.runs.ran == nil {
		m.runs.ran = map[int]int{}
	}
	m.runs.ran[s]++
	return func() {
		m.runs.mu.Lock()
		defer m.runs.mu.Unlock()
		if m.runs.ran[s]--; m.runs.ran[s] <= 0 {
			delete(m.runs.ran, s)
		}
	}
}
