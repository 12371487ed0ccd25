package window

import (
	"container/list"
	"sync"

	"kvwin/window/memory"
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
	key   K
	owner memory.Key // the conversation the value derives from
	val   V
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

func (m *memo[K, V]) put(k K, owner memory.Key, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		it := e.Value.(*memoItem[K, V])
		it.owner, it.val = owner, v
		m.order.MoveToFront(e)
		return
	}
	m.items[k] = m.order.PushFront(&memoItem[K, V]{key: k, owner: owner, val: v})
	for m.order.Len() > m.max {
		e := m.order.Back()
		m.order.Remove(e)
		delete(m.items, e.Value.(*memoItem[K, V]).key)
	}
}

// drop removes every entry derived from owner's conversation.
func (m *memo[K, V]) drop(owner memory.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for e := m.order.Front(); e != nil; {
		next := e.Next()
		if it := e.Value.(*memoItem[K, V]); it.owner == owner {
			m.order.Remove(e)
			delete(m.items, it.key)
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
