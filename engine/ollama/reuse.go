package ollama

import (
	"sync"
	"time"

	"kvwin/kvcache"
)

// Ollama v0.9.6 reports prompt_eval_count for the whole prompt, cached or
// not, so how much of a prompt it reused is kvwin's estimate. The estimate
// models what Ollama's runner does: each of its parallel slots keeps the
// KV of the last sequence it ran (prompt and answer); a new prompt goes to
// the free slot sharing the longest prefix with it and recomputes only what
// follows that prefix.
//
// So a backend remembers, per slot, the approximate key chain
// (kvcache.Keyer.Text, 64-byte blocks of the canonical rendering) of the
// last prompt plus answer, and a new prompt's estimate is its longest
// common prefix of blocks with any of them. Keys rather than the texts:
// memory stays at 8 bytes per 64 bytes of conversation, and the chains are
// the same keys a gateway's registry uses for this backend.
//
// Invariants:
//   - at most Slots chains are held; a finished request replaces the chain
//     of the slot it most likely ran on (its best match, else the least
//     recently used);
//   - chains older than the keep-alive are dropped: Ollama unloaded the
//     model and its KV with it;
//   - reset drops everything: kvwin changed num_ctx, which makes Ollama
//     reload the model.
//
// What it cannot see, and so overstates: another client's requests in
// between (this backend should be the server's only client for the model),
// a slot busy with a concurrent request, a model evicted for another, and an
// answer whose text tokenizes differently when sent back than as generated
// (Ollama then recomputes from that point on). Blocks are whole 64-byte
// units: up to 63 bytes of a real match are not counted.
type residency struct {
	keyer *kvcache.Keyer
	ttl   time.Duration // keep-alive; <= 0 means forever
	n     int           // slots

	mu    sync.Mutex // guards slots; held only to compare or replace keys
	slots []resident
}

// resident is what one slot of the server likely holds.
type resident struct {
	keys []kvcache.Key
	used time.Time
}

// newResidency returns an empty memory of n slots.
func newResidency(keyer *kvcache.Keyer, slots int, ttl time.Duration) *residency {
	return &residency{keyer: keyer, ttl: ttl, n: max(1, slots)}
}

// chain keys a rendering of tenant's prompt. Keys are salted by tenant, as
// a gateway's are: the estimate never counts another tenant's prompt as
// reused, so it says nothing about what others sent.
func (r *residency) chain(tenant, text string) kvcache.Chain {
	return r.keyer.ForTenant(tenant).Text(text)
}

// match returns how many bytes at the start of c some slot holds.
func (r *residency) match(c kvcache.Chain, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	best := 0
	for _, s := range r.slots {
		best = max(best, kvcache.SharedPrefix(s.keys, c.Keys))
	}
	return c.Units(best)
}

// record notes that a slot now holds c: the slot sharing the longest prefix
// with it, else a new slot, else the least recently used one.
func (r *residency) record(c kvcache.Chain, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	entry := resident{keys: c.Keys, used: now}
	pick, best := -1, 0
	for i, s := range r.slots {
		if n := kvcache.SharedPrefix(s.keys, c.Keys); n > best {
			pick, best = i, n
		}
	}
	switch {
	case pick >= 0:
	case len(r.slots) < r.n:
		r.slots = append(r.slots, entry)
		return
	default:
		pick = 0
		for i, s := range r.slots {
			if s.used.Before(r.slots[pick].used) {
				pick = i
			}
		}
	}
	r.slots[pick] = entry
}

// reset forgets every slot.
func (r *residency) reset() {
	r.mu.Lock()
	r.slots = nil
	r.mu.Unlock()
}

// expire drops slots unused for longer than the keep-alive. r.mu is held.
func (r *residency) expire(now time.Time) {
	if r.ttl <= 0 {
		return
	}
	kept := r.slots[:0]
	for _, s := range r.slots {
		if now.Sub(s.used) <= r.ttl {
			kept = append(kept, s)
		}
	}
	clear(r.slots[len(kept):])
	r.slots = kept
}

// cachedTokens turns a match of cachedBytes of a rendering of textBytes
// bytes into tokens of a prompt of promptTokens: in proportion, and never
// the whole prompt, since Ollama always recomputes at least the last token
// to have logits to sample from.
func cachedTokens(promptTokens, cachedBytes, textBytes int) int {
	if promptTokens <= 1 || textBytes <= 0 || cachedBytes <= 0 {
		return 0
	}
	n := int(int64(promptTokens) * int64(min(cachedBytes, textBytes)) / int64(textBytes))
	return min(n, promptTokens-1)
}
