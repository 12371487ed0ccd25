package llamacpp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"kvwin/engine"
	"kvwin/kvcache"
)

// kv links the engine to kvwin's KV bookkeeping: the registry (which slot
// holds which block chain; also the snapshot tier) and the snapshot store.
// The registry is safe for concurrent use; the loop and callers both use it.
type kv struct {
	name      string
	ns        kvcache.Namespace
	blockSize int
	keyer     *kvcache.Keyer
	reg       *kvcache.Registry
	store     *kvcache.Store   // nil: snapshots disabled
	journal   *kvcache.Journal // publishes the store's snapshots beside the slots
	tokens    *kvcache.TokenCache
	prompts   *kvcache.PromptCache
	minTokens int
	log       *slog.Logger

	saves, restores, restoreFailures, saveDrops, saveFailures atomic.Int64
	// restoresFrom counts restores by the medium they were read from
	// (kvcache.MediumRAM, kvcache.MediumDisk).
	restoresFrom [2]atomic.Int64
	// speed is the measured restore speed per medium (timeRestore);
	// speedMu orders its updates.
	speedMu sync.Mutex
	speed   kvcache.RestoreSpeed
}

// modelFingerprint identifies a model file by its size and first MiB (the
// header, metadata and first tensors), cheaply, without reading gigabytes.
// Snapshots and block keys carry it: KV from another model never matches.
func modelFingerprint(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	h := xxhash.New()
	binary.Write(h, binary.LittleEndian, st.Size())
	if _, err := io.CopyN(h, f, 1<<20); err != nil && err != io.EOF {
		return 0, err
	}
	return h.Sum64(), nil
}

// newKV registers the engine in the registry and opens the snapshot store,
// indexing the snapshots a previous run left. A store that cannot be opened
// (read-only or full disk, a file in the way) is logged and snapshots are
// off: the engine serves without them.
func newKV(cfg Config, fp uint64, template string, journal *kvcache.Journal, log *slog.Logger) (*kv, error) {
	ns := kvcache.Namespace{
		Model:    fmt.Sprintf("%016x", fp),
		Template: fmt.Sprintf("%016x", xxhash.Sum64String(template)),
	}
	keyer, err := kvcache.NewKeyer(ns, kvcache.KeyerConfig{BlockTokens: cfg.BlockTokens})
	if err != nil {
		return nil, err
	}
	reg := kvcache.OrNew(cfg.Registry, log)
	capacity, err := kvcache.Budget{Context: cfg.Ctx, Slots: cfg.Slots}.CapacityBlocks(cfg.BlockTokens)
	if err != nil {
		return nil, err
	}
	if err := reg.SetBackend(kvcache.BackendConfig{Name: cfg.Name, CapacityBlocks: capacity}); err != nil {
		return nil, err
	}
	k := &kv{name: cfg.Name, ns: ns, blockSize: cfg.BlockTokens, keyer: keyer, reg: reg, minTokens: cfg.SnapshotMinTokens, journal: journal, log: log}
	if cfg.SnapshotDir == "" {
		return k, nil
	}
	store, existing, err := kvcache.OpenStore(kvcache.StoreConfig{
		Dir: cfg.SnapshotDir, MaxBytes: cfg.SnapshotMaxBytes, Fingerprint: fp, Log: log,
		TTL: cfg.SnapshotTTL, Now: cfg.Now, RAMBytes: cfg.SnapshotRAMBytes, TenantShare: cfg.SnapshotTenantShare,
	})
	if err != nil {
		log.Error("KV snapshots disabled: the snapshot directory cannot be used", "dir", cfg.SnapshotDir, "err", err)
		return k, nil
	}
	k.store = store
	store.OnEvict(k.removed)
	store.OnDemote(func(id string) { journal.SetSaved(kvcache.SavedTokens{ID: id, Tier: kvcache.MediumDisk}) })
	for _, s := range existing {
		reg.AddSnapshot(cfg.Name, s.ID, keyer.ForTenant(s.Owner.Tenant).Tokens(s.Tokens), s.Bytes)
		k.published(s)
	}
	if len(existing) > 0 {
		log.Info("KV snapshots found", "count", len(existing), "bytes", store.Bytes())
	}
	return k, nil
}

// published tells the journal the store holds s now, so every gateway
// following the node can route its conversation's return here.
func (k *kv) published(s kvcache.SavedSnapshot) {
	k.journal.SetSaved(kvcache.SavedTokens{ID: s.ID, Tenant: s.Owner.Tenant, Tier: s.Medium, Bytes: s.Bytes, Tokens: s.Tokens})
}

// removed drops snapshot id from the registry and the journal: the store
// deleted it (evicted, expired, corrupt, its conversation deleted).
func (k *kv) removed(id string) {
	k.reg.RemoveSnapshot(k.name, id)
	k.journal.RemoveSaved(id)
}

// timeRestore folds one restore of tokens from m, which took took (read,
// decode, copy into the context), into the node's measured restore speed
// (a moving average) and publishes it, to two significant digits so that
// noise does not flood the journal. Gateways price restores with it.
func (k *kv) timeRestore(m kvcache.Medium, tokens int, took time.Duration) {
	if tokens <= 0 || took <= 0 {
		return
	}
	rate := float64(tokens) / took.Seconds()
	k.speedMu.Lock()
	defer k.speedMu.Unlock()
	cur := &k.speed.Disk
	if m == kvcache.MediumRAM {
		cur = &k.speed.RAM
	}
	if *cur == 0 {
		*cur = rate
	} else {
		*cur += 0.2 * (rate - *cur)
	}
	k.journal.SetRestoreSpeed(k.speed.Rounded())
}

// shifted returns the keyer of a slot's shifted KV: a shift epoch of its own
// (slot and shift count), so shifted blocks never match unshifted prompts.
func (k *kv) shifted(slot, shifts int) *kvcache.Keyer {
	ns := k.ns
	ns.ShiftEpoch = uint64(slot+1)<<32 | uint64(shifts)
	keyer, err := kvcache.NewKeyer(ns, kvcache.KeyerConfig{BlockTokens: k.blockSize})
	if err != nil {
		return k.keyer // the block size was validated at start; not reached
	}
	return keyer
}

func (k *kv) close() {
	if k.store != nil {
		k.store.Close()
	}
	if k.tokens != nil {
		k.tokens.Close()
	}
	if k.prompts != nil {
		k.prompts.Close()
	}
}

var _ engine.SnapshotExpirer = (*Engine)(nil)

// ExpireSnapshots deletes the KV snapshots not used for the configured
// SnapshotTTL (the engine also does so on its own, every TTL/4, at least
// hourly) and returns how many it deleted. It first waits for the saves
// already queued, so a snapshot saved just before is judged by that save.
// Safe for concurrent use; it blocks on disk. Exported for operators'
// tools and tests.
func (e *Engine) ExpireSnapshots() int {
	if e.kv.store == nil {
		return 0
	}
	e.kv.store.Flush()
	return len(e.kv.store.Expire()) // OnEvict drops them from the registry
}

// forget deletes the snapshots saved for a conversation, and cancels its
// saves still queued, and drops them from the registry; it returns how many
// files there were.
func (k *kv) forget(owner kvcache.Owner) int {
	if k.store == nil {
		return 0
	}
	ids := k.store.DeleteOwned(owner)
	for _, id := range ids {
		k.removed(id)
	}
	return len(ids)
}

// restore is a snapshot loaded for a task, verified against its prompt.
type restore struct {
	id     string
	tokens []int
	state  []byte
	reuse  int            // prompt tokens it covers
	medium kvcache.Medium // where it was read from
	loaded time.Duration  // reading and decoding it took
}

// prepareRestore loads the best snapshot of tenant's for prompt when it
// covers more of the prompt than any live slot, by at least minGain tokens.
// It runs on the caller's goroutine: disk reads and decompression stay off
// the decode path.
func (k *kv) prepareRestore(tenant string, chain kvcache.Chain, prompt []int) *restore {
	if k.store == nil || len(chain.Keys) == 0 {
		return nil
	}
	const minGainBlocks = 4
	live, snap := 0, kvcache.Match{}
	for _, m := range k.reg.Lookup(chain).Matches {
		if m.Backend != k.name {
			continue
		}
		if m.Tier == kvcache.TierSnapshot {
			if m.Blocks > snap.Blocks {
				snap = m
			}
		} else {
			live = max(live, m.Blocks)
		}
	}
	if snap.Blocks < live+minGainBlocks {
		return nil
	}
	start := time.Now()
	l, err := k.store.Load(snap.Snapshot)
	if err != nil {
		k.log.Warn("snapshot unusable; deleted, prefilling instead", "err", err)
		k.removed(snap.Snapshot)
		k.restoreFailures.Add(1)
		return nil
	}
	if l.Owner.Tenant != tenant {
		return nil // a key collision across tenants: never restore another tenant's KV
	}
	return &restore{id: snap.Snapshot, tokens: l.Tokens, state: l.State, reuse: min(kvcache.SharedPrefix(l.Tokens, prompt), reuseLimit(len(prompt))), medium: l.Medium,
		loaded: time.Since(start)}
}

// save queues a snapshot of a slot's KV, held for owner, before the slot is
// given away.
func (k *kv) save(owner kvcache.Owner, tokens []int, state []byte) {
	if k.store == nil || len(tokens) < k.minTokens || len(state) == 0 {
		return
	}
	owned := append([]int(nil), tokens...)
	id := kvcache.SnapshotID(owner, owned)
	chain := k.keyer.ForTenant(owner.Tenant).Tokens(owned)
	// The registry learns of the snapshot at once, so the conversation's next
	// turn finds it even while it is being written (Load waits for the write).
	k.reg.AddSnapshot(k.name, id, chain, int64(len(state)))
	ok := k.store.Save(owner, owned, state, func(s kvcache.SavedSnapshot, err error) {
		if errors.Is(err, kvcache.ErrSaveCancelled) {
			k.removed(id) // its conversation was deleted
			return
		}
		if err != nil {
			k.reg.RemoveSnapshot(k.name, id) // the store logged why
			k.saveFailures.Add(1)
			return
		}
		k.saves.Add(1)
		k.reg.AddSnapshot(k.name, s.ID, chain, s.Bytes)
		k.reg.CountSnapshotSave(k.name)
		k.published(s)
	})
	if !ok {
		k.reg.RemoveSnapshot(k.name, id)
		k.saveDrops.Add(1)
		k.log.Warn("snapshot queue full; slot given away without a snapshot", "tokens", len(tokens))
	}
}
