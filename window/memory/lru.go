package memory

import "container/list"

// lru is a bounded least-recently-used map. Not safe for concurrent use; the
// Store guards it with its lock.
type lru[K comparable, V any] struct {
	max   int
	order *list.List
	items map[K]*list.Element
}

type lruItem[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, order: list.New(), items: map[K]*list.Element{}}
}

func (l *lru[K, V]) get(k K) (V, bool) {
	if e, ok := l.items[k]; ok {
		l.order.MoveToFront(e)
		return e.Value.(*lruItem[K, V]).val, true
	}
	var zero V
	return zero, false
}

func (l *lru[K, V]) put(k K, v V) {
	if e, ok := l.items[k]; ok {
		e.Value.(*lruItem[K, V]).val = v
		l.order.MoveToFront(e)
		return
	}
	l.items[k] = l.order.PushFront(&lruItem[K, V]{key: k, val: v})
	for l.order.Len() > l.max {
		e := l.order.Back()
		l.order.Remove(e)
		delete(l.items, e.Value.(*lruItem[K, V]).key)
	}
}

func (l *lru[K, V]) remove(k K) {
	if e, ok := l.items[k]; ok {
		l.order.Remove(e)
		delete(l.items, k)
	}
}
