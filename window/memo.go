package window

import (
	"sync"

	"kvwin/internal/lru"
	"kvwin/window/memory"
)

// memo is a least-recently-used map bounded by bytes (an lru.Map), safe
// for concurrent use. It holds derived state only (packets, indexes): losing
// an entry costs a recomputation, never a different answer. Each value's
// size is taken once, when it is put (the values are not changed after).
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	items *lru.Map[K, memoItem[V]]
}

type memoItem[V any] struct {
	owner memory.Key // the conversation the value derives from
	val   V
}

func newMemo[K comparable, V any](maxBytes int64, size func(V) int64) *memo[K, V] {
	return &memo[K, V]{items: lru.New[K](maxBytes, func(it memoItem[V]) int64 { return size(it.val) })}
}

func (m *memo[K, V]) get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items.Get(k)
	return it.val, ok
}

func (m *memo[K, V]) put(k K, owner memory.Key, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items.Put(k, memoItem[V]{owner: owner, val: v})
}

// drop removes every entry derived from owner's conversation.
func (m *memo[K, V]) drop(owner memory.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items.RemoveIf(func(_ K, it memoItem[V]) bool { return it.owner == owner })
}

// count returns the entries derived from owner's conversation.
func (m *memo[K, V]) count(owner memory.Key) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items.Count(func(_ K, it memoItem[V]) bool { return it.owner == owner })
}

// bytes is what the held values measured when put.
func (m *memo[K, V]) bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items.Bytes()
}

// packetBytes is what a memoized packet holds: its turns' text, handles
// and roles (shared with the request that made them while it lasts, the
// packet's own once the request is gone) and the turns themselves.
func packetBytes(p Packet) int64 {
	n := int64(64)
	for _, t := range p.Turns {
		n += int64(len(t.Text)+len(t.Handle)+len(t.Role)) + 96
	}
	return n
}
