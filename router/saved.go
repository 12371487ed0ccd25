package router

import (
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

// savedPrefix marks the registry ids of snapshots a node published.
const savedPrefix = "node:"

// savedTiers is where a member's published snapshots are, by registry id.
// Safe for concurrent use: the follower writes, estimates read.
type savedTiers struct {
	mu        sync.Mutex
	tier      map[string]kvcache.Medium
	published bool                 // the node has published a snapshot: no guessing
	speed     kvcache.RestoreSpeed // as the node measured and published it
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
	if t, ok := s.tier[id]; ok {
		return t
	}
	return kvcache.MediumDisk
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
	for _, t := range s.tier {
		if out == nil {
			out = map[string]int{}
		}
		out[t.String()]++
	}
	return out
}

func (s *savedTiers) set(id string, t kvcache.Medium, stored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tier == nil {
		s.tier = map[string]kvcache.Medium{}
	}
	s.published = true
	if stored {
		s.tier[id] = t
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
		m.saved.set(rid, st.Tier, stored)
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
	if tokens <= 0 {
		return 0
	}
	tier, speed := m.saved.restoring(id)
	if speed > 0 {
		return time.Duration(float64(tokens) / speed * float64(time.Second))
	}
	return time.Duration(restoreShare[tier] * float64(cost.Predict(tokens, 0)))
}
