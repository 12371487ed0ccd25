package window

import (
	"container/list"
	"sync"

	"kvwin/window/memory"
)

// memo is a least-recently-used map bounded by bytes, safe for concurrent
// use. It holds derived state only (packets, indexes): losing an entry
// costs a recomputation, never a different answer. Each value's size is
// taken once, when it is put (the values are not changed after); the least
// recently used go until the held bytes are within max, the newest always
// staying.
//
// Invariant: used is the sum of the items' bytes.
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	max   int64
	size  func(V) int64
	used  int64
	order *list.List // front: most recent
	items map[K]*list.Element
}

type memoItem[K comparable, V any] struct {
	key   K
	owner memory.Key // the conversation the value derives from
	val   V
	bytes int64
}

func newMemo[K comparable, V any](maxBytes int64, size func(V) int64) *memo[K, V] {
	return &memo[K, V]{max: maxBytes, size: size, order: list.New(), items: map[K]*list.Element{}}
}

func (m *memo[K, V]) get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		m.order.MoveToFront(e)
		return e.Value.(*memoItem[K, V]).val, true
	}
	var zero V
	return zero, false
}

func (m *memo[K, V]) put(k K, owner memory.Key, v V) {
	n := m.size(v)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		it := e.Value.(*memoItem[K, V])
		m.used += n - it.bytes
		it.owner, it.val, it.bytes = owner, v, n
		m.order.MoveToFront(e)
	} else {
		m.items[k] = m.order.PushFront(&memoItem[K, V]{key: k, owner: owner, val: v, bytes: n})
		m.used += n
	}
	for m.used > m.max && m.order.Len() > 1 {
		m.remove(m.order.Back())
	}
}

// remove drops e. Callers hold m.mu.
func (m *memo[K, V]) remove(e *list.Element) {
	it := e.Value.(*memoItem[K, V])
	m.order.Remove(e)
	delete(m.items, it.key)
	m.used -= it.bytes
}

// drop removes every entry derived from owner's conversation.
func (m *memo[K, V]) drop(owner memory.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for e := m.order.Front(); e != nil; {
		next := e.Next()
		if it := e.Value.(*memoItem[K, V]); it.owner == owner {
			m.remove(e)
		}
		e = next
	}
}

// count returns the entries derived from owner's conversation.
func (m *memo[K, V]) count(owner memory.Key) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.items {
		if e.Value.(*memoItem[K, V]).owner == owner {
			n++
		}
	}
	return n
}

// bytes is what the held values measured when put.
func (m *memo[K, V]) bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
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
