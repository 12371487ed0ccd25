package window

import (
	"container/list"
	"sync"
)

// memo is a bounded least-recently-used map, safe for concurrent use. It
// holds derived state only (packets, indexes): losing an entry costs a
// recomputation, never a different answer.
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recent
	items map[K]*list.Element
}

type memoItem[K comparable, V any] struct {
	key K
	val V
}

func newMemo[K comparable, V any](max int) *memo[K, V] {
	return &memo[K, V]{max: max, order: list.New(), items: map[K]*list.Element{}}
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

func (m *memo[K, V]) put(k K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		e.Value.(*memoItem[K, V]).val = v
		m.order.MoveToFront(e)
		return
	}
	m.items[k] = m.order.PushFront(&memoItem[K, V]{key: k, val: v})
	for m.order.Len() > m.max {
		e := m.order.Back()
		m.order.Remove(e)
		delete(m.items, e.Value.(*memoItem[K, V]).key)
	}
}
