package fleet

import (
	"strconv"
	"strings"

	"kvwin/kvcache"
)

// The snapshot tiers of a simulated kvwin node (issue 48; docs/fleet.md,
// "Snapshots from the nodes"), run by the rules of the node's own store
// (kvcache.Store, engine/llamacpp/kv.go and loop.go):
//
//   - Save: when a turn takes a slot whose last prompt it does not
//     continue, the slot's KV (its prompt and answer) is kept as a
//     snapshot, unless the store already holds those tokens (then it is
//     marked used) or they are fewer than MinTokens. A new snapshot goes to
//     RAM if it fits the tenant's share of the RAM budget, else to disk.
//     The conversation's older snapshots that it extends are dropped: it
//     restores all they would.
//   - RAM over its budget, or the tenant over its share: the least recently
//     used RAM snapshot is demoted to disk; disk over its budget: the least
//     recently used disk snapshot is evicted. A restore marks one used; it
//     is not promoted back to RAM.
//   - Restore: the snapshot sharing the most full blocks with the prompt,
//     if that is at least 4 blocks more than any live slot of the node
//     holds; it is read whole (all its tokens), at its tier's speed.
//   - Every save, demotion, eviction and measured restore speed is
//     published in the node's journal (kvcache.Journal), which the router
//     follows as a gateway follows a real node's.
//
// Invariants, between events: ramBytes and diskBytes are the sums of the
// sizes of the snapshots in each tier; ramBytes <= the tenant's cap (the
// simulation has one tenant) and diskBytes <= DiskBytes; the journal's
// saved set is exactly files.

// Tiers is a kvwin node's snapshot store: its RAM tier (--kv-ram) and its
// disk tier (--snapshot-max-bytes), in bytes. Zero: no snapshots.
type Tiers struct {
	RAMBytes, DiskBytes int64
	// TenantShare is the most of RAMBytes one tenant's snapshots may hold
	// (--kv-ram-tenant-percent); 0: kvcache.DefaultTenantShare. The
	// simulation has one tenant, so it is the RAM tier's reach.
	TenantShare float64
	// MinTokens: shorter slots are not saved; 0: the engine's 256.
	MinTokens int
}

// On reports whether the node keeps snapshots.
func (t Tiers) On() bool { return t.RAMBytes > 0 || t.DiskBytes > 0 }

// Default tier sizes, by the node's own default rules: --kv-ram is an
// eighth of MemAvailable at start, at most 4 GiB (cmd/kvwin/app/kvram.go);
// a GPU host serving the default 8B model has far more than the 32 GiB
// available that reaches the cap. --snapshot-max-bytes is an eighth of
// the free disk at start, at most 16 GiB (cmd/kvwin/app/kvdisk.go): such a
// host has far more than the 128 GiB free that reaches that cap.
const (
	DefaultRAMTier  = 4 << 30
	DefaultDiskTier = 16 << 30
)

// DefaultTiers is a kvwin node's store with serve's defaults.
func DefaultTiers() Tiers { return Tiers{RAMBytes: DefaultRAMTier, DiskBytes: DefaultDiskTier} }

// String names the tiers in MiB, as the report shows them: "ram4096+disk16384".
func (t Tiers) String() string {
	if !t.On() {
		return ""
	}
	return "ram" + strconv.FormatInt(t.RAMBytes>>20, 10) + "+disk" + strconv.FormatInt(t.DiskBytes>>20, 10)
}

// savedKV is one snapshot of a simulated node.
type savedKV struct {
	id     string
	tokens []int // a view of its conversation's stream
	bytes  int64
	medium kvcache.Medium
	used   uint64
}

// snapshotStore is a simulated node's two tiers. Its state is touched only
// by the simulation's one thread of control.
type snapshotStore struct {
	cfg           Tiers
	bytesPerToken int
	journal       *kvcache.Journal
	files         map[string]*savedKV
	ramBytes      int64
	diskBytes     int64
	clock         uint64
	// measured is the restore speed published so far (a tier's is
	// published after its first restore, as a node measures it).
	measured kvcache.RestoreSpeed
}

func newSnapshotStore(cfg Tiers, bytesPerToken int, journal *kvcache.Journal) *snapshotStore {
	if cfg.TenantShare == 0 {
		cfg.TenantShare = kvcache.DefaultTenantShare
	}
	if cfg.MinTokens == 0 {
		cfg.MinTokens = 256
	}
	return &snapshotStore{cfg: cfg, bytesPerToken: max(bytesPerToken, 1), journal: journal, files: map[string]*savedKV{}}
}

// ramCap is the most the one tenant's snapshots may hold in RAM.
func (st *snapshotStore) ramCap() int64 {
	return min(st.cfg.RAMBytes, int64(float64(st.cfg.RAMBytes)*st.cfg.TenantShare))
}

// save keeps tokens (conversation conv's KV) as a snapshot, by the rules
// above.
func (st *snapshotStore) save(conv int, tenant string, tokens []int) {
	if len(tokens) < st.cfg.MinTokens {
		return
	}
	id := strconv.Itoa(conv) + "/" + strconv.Itoa(len(tokens))
	st.clock++
	if f, ok := st.files[id]; ok {
		f.used = st.clock
		return
	}
	f := &savedKV{id: id, tokens: tokens, bytes: int64(len(tokens)) * int64(st.bytesPerToken), used: st.clock}
	switch {
	case st.cfg.RAMBytes > 0 && f.bytes <= st.ramCap():
		f.medium = kvcache.MediumRAM
		st.ramBytes += f.bytes
	case f.bytes <= st.cfg.DiskBytes:
		f.medium = kvcache.MediumDisk
		st.diskBytes += f.bytes
	default:
		return
	}
	st.files[id] = f
	st.journal.SetSaved(kvcache.SavedTokens{ID: id, Tenant: tenant, Tier: f.medium, Bytes: f.bytes, Tokens: tokens})
	st.dropExtended(conv, f)
	st.trimRAM(id)
	st.trimDisk(id)
}

// dropExtended drops conv's snapshots but f whose tokens f's begin with,
// as the node's store does (kvcache.Store.dropExtended).
func (st *snapshotStore) dropExtended(conv int, f *savedKV) {
	pre := strconv.Itoa(conv) + "/"
	for id, o := range st.files {
		if o != f && strings.HasPrefix(id, pre) && len(o.tokens) < len(f.tokens) && lcp(o.tokens, f.tokens) == len(o.tokens) {
			if o.medium == kvcache.MediumRAM {
				st.ramBytes -= o.bytes
			}
			st.evict(o, o.medium == kvcache.MediumDisk)
		}
	}
}

// trimRAM demotes the least recently used RAM snapshots, sparing keep,
// until the RAM tier is within its cap.
func (st *snapshotStore) trimRAM(keep string) {
	for st.ramBytes > st.ramCap() {
		v := st.oldest(kvcache.MediumRAM, keep)
		if v == nil {
			return
		}
		st.ramBytes -= v.bytes
		if v.bytes > st.cfg.DiskBytes {
			st.evict(v, false)
			continue
		}
		v.medium = kvcache.MediumDisk
		st.diskBytes += v.bytes
		st.journal.SetSaved(kvcache.SavedTokens{ID: v.id, Tier: kvcache.MediumDisk})
		st.trimDisk(v.id)
	}
}

// trimDisk evicts the least recently used disk snapshots, sparing keep,
// until the disk tier is within its budget.
func (st *snapshotStore) trimDisk(keep string) {
	for st.diskBytes > st.cfg.DiskBytes {
		v := st.oldest(kvcache.MediumDisk, keep)
		if v == nil {
			return
		}
		st.evict(v, true)
	}
}

// evict drops v (counted in the disk tier if onDisk).
func (st *snapshotStore) evict(v *savedKV, onDisk bool) {
	if onDisk {
		st.diskBytes -= v.bytes
	}
	delete(st.files, v.id)
	st.journal.RemoveSaved(v.id)
}

// oldest is the least recently used snapshot in medium but keep; nil if
// none.
func (st *snapshotStore) oldest(medium kvcache.Medium, keep string) *savedKV {
	var o *savedKV
	for id, f := range st.files {
		if f.medium == medium && id != keep && (o == nil || f.used < o.used) {
			o = f
		}
	}
	return o
}

// best is the snapshot to restore for prompt, as the node's
// prepareRestore chooses it: the one sharing the most full blocks of the
// prompt, if at least 4 blocks more than liveBlocks (the most any live
// slot holds); nil if none.
func (st *snapshotStore) best(prompt []int, liveBlocks int) *savedKV {
	const minGainBlocks = 4
	var b *savedKV
	bestBlocks := 0
	for _, f := range st.files {
		if n := lcp(f.tokens, prompt) / oracleBlock; n > bestBlocks || n == bestBlocks && b != nil && n > 0 && f.id < b.id {
			b, bestBlocks = f, n
		}
	}
	if b == nil || bestBlocks < liveBlocks+minGainBlocks {
		return nil
	}
	return b
}

// restored marks f used and returns the time of reading it whole at its
// tier's speed; the node's measured speed is published once per tier.
func (st *snapshotStore) restored(f *savedKV, m NodeModel) float64 {
	st.clock++
	f.used = st.clock
	rate := m.RestoreBytes[f.medium] // bytes per second
	speed := rate / float64(st.bytesPerToken)
	pub := st.measured
	if f.medium == kvcache.MediumRAM {
		pub.RAM = speed
	} else {
		pub.Disk = speed
	}
	if pub = pub.Rounded(); pub != st.measured {
		st.measured = pub
		st.journal.SetRestoreSpeed(pub)
	}
	return float64(len(f.tokens)*st.bytesPerToken) / rate
}
