package router

import (
	"math"
	"sync"
	"time"

	"kvwin/attention"
	"kvwin/kvcache"
)

// Snapshots from the nodes (docs/fleet.md, "Snapshots from the nodes").
//
// A kvwin node publishes, beside its slots, every KV snapshot its store
// holds and in which tier (RAM or disk): saved when a slot was given away,
// demoted from RAM to disk, removed (evicted, expired, its conversation
// deleted). The follower keys each one for the tenant the node says owns
// it, as it keys slots (residentChain's rules), into the registry's
// snapshot tier under "node:" + the node's id, so they never mix with the
// chains the router guesses a node saved from its own turns (remember);
// once a node publishes snapshots, the router stops guessing for it.
//
// A turn whose best hold on a backend is a snapshot is priced with the
// restore (restoreTime) in the same predicted time to first token as
// everything else: the prefill of what the snapshot lacks, the queue, and
// reading the snapshot back. So a saturated node's restore can lose to a
// recompute elsewhere.
//
// Displacing a chain. Such a node saves the chain of a slot a turn takes
// from another conversation, so what taking the slot costs that
// conversation is a restore, if its snapshot is still there when it comes
// back, and its recompute if not. The router learns how often a node's
// snapshots are lost so from the node's own journal: of the snapshots it
// stored, the expected number removed while their conversation was still
// likely to come back (each removal weighed by the liveness of its chain's
// last block, liveness.go). The displaced chain costs its restore from
// RAM, and its recompute times that loss share (destroyedTime), weighed
// by its own liveness as placement.go weighs it. The restore counts
// whole, not only where the snapshot survives: its owner, back on a node
// whose slots are all held, restores it and displaces another in turn, a
// cost the expectation alone leaves out (bench fleet, 64 kvwin nodes with
// tiers at load 0.2: 1.21× the oracle's prefill and TTFT p90 124 ms; 1.23×
// and 192 ms with the restore weighed by the share kept). The share starts
// at 1 (lossPrior) and counts only while liveness is trusted, so a node
// must show that it keeps what it saves before displacing there looks
// cheaper than on a node without snapshots. It is what the node's tiers
// and its load make of displacement, so the price corrects itself:
// displace more, and more is lost. Priced as a restore alone, displacing
// overflowed the stores (docs/fleet.md).

// Claims. The conversations whose snapshots a node holds and that are
// likely to come back (each weighed by the liveness of its chain's last
// block) will each want one of its slots, where a restore saves their
// recompute. A turn that is not one of them there (a newcomer, or a
// return anywhere but on the node holding the most of its prompt: one
// that would move) and takes a slot on a node whose expected returns
// outnumber the free slots it leaves there leaves one of them without a
// free slot: that return will displace the node's least costly chain, at
// the price destroyedTime gives it, and the turn's plan counts that price
// (times the share of a return the free slots lack, at most one). So
// newcomers and moving returns go where they do not take the slots other
// returns would restore into, and a return that would move weighs the
// node it would crowd: bench fleet, 64 kvwin nodes with the default tiers,
// prefill 1.12×, 1.59× and 2.17× the oracle's at load 0.2, 0.6 and 1.0
// before, 1.09×, 1.35× and 1.58× after; TTFT p90 195, 420 and 527 ms
// before, 115, 459 and 539 ms after, the best of every policy at each
// load still (docs/fleet.md).

// claimedTime is what a turn that is not one of the returns m's snapshots
// wait for costs them by taking plan p on m (see Claims): 0 on a node that
// holds none, or where the free slots p leaves cover them.
func (r *Router) claimedTime(m *member, plans []slotPlan, p slotPlan, room bool, cost attention.Predictor) time.Duration {
	if p.slot < 0 {
		return 0
	}
	free, least := 0, time.Duration(-1)
	for _, q := range plans {
		if q.slot != p.slot && (q.evicted == 0 || 1-q.stale < abandoned) {
			free++
			continue
		}
		if d := q.destroyed(room); q.slot != p.slot && d > 0 {
			if t := destroyedTime(m, q, d, cost); least < 0 || t < least {
				least = t
			}
		}
	}
	if least <= 0 || free >= m.saved.held() {
		return 0 // no chain to displace, or a free slot for every snapshot
	}
	over := r.claims(m) - float64(free)
	if over <= 0 {
		return 0
	}
	return time.Duration(min(over, 1) * float64(least))
}

// homeMatch is, for a turn continuing a chain (a return, a branch), the
// length of the fleet's longest exact match of its prompt: on a node
// holding that much the turn is one of the returns the node's snapshots
// wait for and counts no claim (see Claims). -1 for a newcomer, which
// counts them wherever it would go.
func (r *Router) homeMatch(k key, matches map[string]kvcache.Match) int {
	if len(k.exact.Keys) == 0 || !r.liveness.continues(k.exact.Keys) {
		return -1
	}
	longest := 0
	for _, mt := range matches {
		if !mt.Approximate {
			longest = max(longest, mt.Length)
		}
	}
	return longest
}

// claims is how many of the conversations whose snapshots m holds are
// expected back: the liveness of each one's last block, summed.
func (r *Router) claims(m *member) float64 {
	m.saved.mu.Lock()
	tips := make([]kvcache.Key, 0, len(m.saved.tier))
	for _, e := range m.saved.tier {
		tips = append(tips, e.tip)
	}
	m.saved.mu.Unlock()
	return r.liveness.expected(tips, r.cfg.Now())
}

// savedPrefix marks the registry ids of snapshots a node published.
const savedPrefix = "node:"

// savedTiers is where a member's published snapshots are, by registry id.
// Safe for concurrent use: the follower writes, estimates read.
type savedTiers struct {
	mu        sync.Mutex
	tier      map[string]savedEntry
	published bool                 // the node has published a snapshot: no guessing
	speed     kvcache.RestoreSpeed // as the node measured and published it
	// saves counts the snapshots stored, lost the expected number of them
	// removed while their conversation was likely to come back; both
	// decay by lossDecay an event (see the file comment).
	saves, lost float64
}

// savedEntry is one published snapshot: its tier and the last key of its
// chain, by which liveness knows its conversation.
type savedEntry struct {
	tier kvcache.Medium
	tip  kvcache.Key
}

// lossDecay is the weight an event keeps of the counts before it: the
// loss share follows about the node's last thousand snapshots.
const lossDecay = 1 - 1.0/1024

// lossPrior is how many snapshots, all lost, the loss share starts from:
// a node must show it keeps snapshots before a displaced chain counts as
// saved.
const lossPrior = 8

// stored counts a new snapshot; removed a removal whose conversation was
// to come back with the chance live.
func (s *savedTiers) stored() { s.count(1, 0) }

func (s *savedTiers) removed(live float64) { s.count(0, live) }

func (s *savedTiers) count(saves, lost float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves = s.saves*lossDecay + saves
	s.lost = s.lost*lossDecay + lost
}

// lossShare is the share of the node's snapshots lost before their
// conversation came back, with lossPrior snapshots lost for a prior.
func (s *savedTiers) lossShare() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return min((s.lost+lossPrior)/(s.saves+lossPrior), 1)
}

// displacing is what a displaced chain is priced by: the node's measured
// speed of restoring from RAM (0: not measured) and its loss share.
func (s *savedTiers) displacing() (ramSpeed, loss float64) {
	loss = s.lossShare()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.speed.RAM, loss
}

// loss is lossShare for a node that has published a snapshot, to two
// decimals (status); nil otherwise.
func (s *savedTiers) loss() *float64 {
	if !s.publishes() {
		return nil
	}
	v := math.Round(s.lossShare()*100) / 100
	return &v
}

// entry returns what is known of the published snapshot id.
func (s *savedTiers) entry(id string) (savedEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.tier[id]
	return e, ok
}

// restoring returns the medium of the snapshot id and the node's measured
// speed of restoring from it (0: not measured).
func (s *savedTiers) restoring(id string) (kvcache.Medium, float64) {
	t := s.of(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return t, s.speed.Of(t)
}

// setSpeed records the node's published restore speed and reports
// whether it changed.
func (s *savedTiers) setSpeed(rs kvcache.RestoreSpeed) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := rs != s.speed
	s.speed = rs
	return changed
}

// of returns the medium of the snapshot id (disk for one the router
// guessed, whose tier it cannot know).
func (s *savedTiers) of(id string) kvcache.Medium {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.tier[id]; ok {
		return e.tier
	}
	return kvcache.MediumDisk
}

// held is how many snapshots the node holds.
func (s *savedTiers) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tier)
}

// publishes reports whether the node has published any snapshot.
func (s *savedTiers) publishes() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published
}

// counts is how many snapshots each tier holds, by its name; nil if none.
func (s *savedTiers) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]int
	for _, e := range s.tier {
		if out == nil {
			out = map[string]int{}
		}
		out[e.tier.String()]++
	}
	return out
}

func (s *savedTiers) set(id string, e savedEntry, stored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tier == nil {
		s.tier = map[string]savedEntry{}
	}
	s.published = true
	if stored {
		s.tier[id] = e
	} else {
		delete(s.tier, id)
	}
}

// applySaved makes the registry's snapshot tier of m hold what mirror says
// m's store holds, for the snapshots the last events changed.
func (r *Router) applySaved(m *member, mirror *kvcache.Mirror) {
	speedChanged := m.saved.setSpeed(mirror.RestoreSpeed())
	changed := mirror.SavedChanges()
	if len(changed) == 0 {
		if speedChanged {
			r.changed()
		}
		return
	}
	for _, id := range changed {
		rid := savedPrefix + id
		st, stored := mirror.Saved(id)
		var chain kvcache.Chain
		switch {
		case !stored:
		case r.cfg.SoleTenant != "":
			chain = r.exact.ForTenant(r.cfg.SoleTenant).Tokens(st.Tokens)
		case m.backend.Info().Tenants:
			chain = r.exact.ForTenant(st.Tenant).Tokens(st.Tokens)
		}
		// A node that does not keep tenants apart, on a gateway of
		// several: whose the snapshot is cannot be told, so it is not
		// believed (residentChain).
		stored = stored && len(chain.Keys) > 0
		prev, had := m.saved.entry(rid)
		now := r.cfg.Now()
		switch {
		case stored && !had && r.liveness.trusted(now):
			m.saved.stored()
		case !stored && had:
			if w, known := r.liveness.tipWeight(prev.tip, now); known {
				m.saved.removed(w.byDepth)
			}
		}
		e := savedEntry{tier: st.Tier}
		if stored {
			e.tip = chain.Keys[len(chain.Keys)-1]
		}
		m.saved.set(rid, e, stored)
		if !stored {
			_ = r.reg.RemoveSnapshot(m.name, rid) // unknown: never added
			continue
		}
		_ = r.reg.AddSnapshot(m.name, rid, chain, st.Bytes)
	}
	r.changed()
}

// restoreShare is a restore's time as a share of the cold prefill of the
// tokens it restores, per medium, for a node that has not published its
// measured restore speed (kvcache.RestoreSpeed) yet. Disk: kvwin's measurement on its
// reference model (issue 48: a snapshot restores at 0.010× the time of a
// cold prefill, the zstd decode, checksum and state copy dominating). RAM
// skips only the file read: kvcache's BenchmarkStoreLoad reads a 4 MiB
// state in 2.86 ms from RAM against 2.99 ms from a file in the page cache
// (0.957×); a file that must come from the device costs more. The shares
// are the router's prior until the node measures its own.
var restoreShare = [...]float64{kvcache.MediumRAM: 0.0096, kvcache.MediumDisk: 0.010}

// restoreTime predicts restoring tokens from the snapshot id on m: at the
// speed m measured from that tier, or else a share of what the cost model
// cost predicts for their cold prefill.
func restoreTime(m *member, id string, tokens int, cost attention.Predictor) time.Duration {
	tier, speed := m.saved.restoring(id)
	return restoreFrom(tier, speed, tokens, cost)
}

// restoreFrom predicts restoring tokens from tier at speed (tokens a
// second; 0: not measured, a share of their cold prefill by cost).
func restoreFrom(tier kvcache.Medium, speed float64, tokens int, cost attention.Predictor) time.Duration {
	if tokens <= 0 {
		return 0
	}
	if speed > 0 {
		return time.Duration(float64(tokens) / speed * float64(time.Second))
	}
	return time.Duration(restoreShare[tier] * float64(cost.Predict(tokens, 0)))
}

// destroyedTime is the time of what taking plan p's slot on m destroys,
// d tokens as placement.go weighs them: their recompute, or, where m
// saves the chain it displaces (see the file comment), their restore from
// RAM plus their recompute times the node's loss share. A branch of the
// turn's own chain is overwritten in place, never saved.
func destroyedTime(m *member, p slotPlan, d int, cost attention.Predictor) time.Duration {
	recompute := cost.Predict(d, 0)
	if !m.backend.Info().SharesPrefixes || !m.saved.publishes() || p.branch {
		return recompute
	}
	speed, loss := m.saved.displacing()
	return restoreFrom(kvcache.MediumRAM, speed, d, cost) + time.Duration(loss*float64(recompute))
}
