// Package lru is a least-recently-used map bounded by the bytes its
// values measure. See Map.
package lru

import "container/list"

// Map is a least-recently-used map bounded by bytes: each value's size is
// taken when it is put and again when Resize says it changed, and the least
// recently used go until the held bytes are within the bound. The newest
// entry always stays, so one value larger than the whole bound is held alone
// (until another is used) rather than refused. Not safe for concurrent use;
// its owner guards it with a lock.
//
// Invariant: used is the sum of the items' bytes.
type Map[K comparable, V any] struct {
	max   int64
	size  func(V) int64
	used  int64
	order *list.List // front: most recent
	items map[K]*list.Element
}

type item[K comparable, V any] struct {
	key   K
	val   V
	bytes int64 // size(val) when last measured
}

// New returns an empty map holding at most maxBytes as size measures them.
func New[K comparable, V any](maxBytes int64, size func(V) int64) *Map[K, V] {
	return &Map[K, V]{max: maxBytes, size: size, order: list.New(), items: map[K]*list.Element{}}
}

// Get returns k's value and counts it as used.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if e, ok := m.items[k]; ok {
		m.order.MoveToFront(e)
		return e.Value.(*item[K, V]).val, true
	}
	var zero V
	return zero, false
}

// Put sets k's value, counts it as used and evicts down to the bound.
func (m *Map[K, V]) Put(k K, v V) {
	if e, ok := m.items[k]; ok {
		e.Value.(*item[K, V]).val = v
		m.order.MoveToFront(e)
		m.measure(e)
		return
	}
	e := m.order.PushFront(&item[K, V]{key: k, val: v})
	m.items[k] = e
	m.measure(e)
}

// Resize measures k's value again (it grew or shrank in place) and evicts
// down to the bound. It does not count as a use.
func (m *Map[K, V]) Resize(k K) {
	if e, ok := m.items[k]; ok {
		m.measure(e)
	}
}

func (m *Map[K, V]) measure(e *list.Element) {
	it := e.Value.(*item[K, V])
	n := m.size(it.val)
	m.used += n - it.bytes
	it.bytes = n
	for m.used > m.max && m.order.Len() > 1 {
		m.evict(m.order.Back())
	}
}

// Remove drops k.
func (m *Map[K, V]) Remove(k K) {
	if e, ok := m.items[k]; ok {
		m.evict(e)
	}
}

// RemoveIf drops every entry drop returns true for.
func (m *Map[K, V]) RemoveIf(drop func(K, V) bool) {
	for e := m.order.Front(); e != nil; {
		next := e.Next()
		if it := e.Value.(*item[K, V]); drop(it.key, it.val) {
			m.evict(e)
		}
		e = next
	}
}

// Count returns how many entries match returns true for.
func (m *Map[K, V]) Count(match func(K, V) bool) int {
	n := 0
	for k, e := range m.items {
		if match(k, e.Value.(*item[K, V]).val) {
			n++
		}
	}
	return n
}

func (m *Map[K, V]) evict(e *list.Element) {
	it := e.Value.(*item[K, V])
	m.order.Remove(e)
	delete(m.items, it.key)
	m.used -= it.bytes
}

// Bytes is what the held values measured last.
func (m *Map[K, V]) Bytes() int64 { return m.used }

// Len is the number of entries.
func (m *Map[K, V]) Len() int { return len(m.items) }
