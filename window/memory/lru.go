package memory

import "container/list"

// lru is a least-recently-used map bounded by bytes: each value's size is
// taken when it is put and again when resize says it grew, and the least
// recently used go until the held bytes are within max. The newest entry
// always stays, so one value larger than the whole bound is held alone
// (until another is used) rather than refused: a conversation never fails
// for its size; what is dropped is read back from the file when used
// again. Not safe for concurrent use; its owner guards it with a lock.
//
// Invariant: used is the sum of the items' bytes.
type lru[K comparable, V any] struct {
	max   int64
	size  func(V) int64
	used  int64
	order *list.List // front: most recent
	items map[K]*list.Element
}

type lruItem[K comparable, V any] struct {
	key   K
	val   V
	bytes int64 // size(val) when last measured
}

func newLRU[K comparable, V any](maxBytes int64, size func(V) int64) *lru[K, V] {
	return &lru[K, V]{max: maxBytes, size: size, order: list.New(), items: map[K]*list.Element{}}
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
		l.measure(e)
		return
	}
	e := l.order.PushFront(&lruItem[K, V]{key: k, val: v})
	l.items[k] = e
	l.measure(e)
}

// resize measures k's value again (it grew or shrank in place) and evicts
// down to the bound. It does not count as a use.
func (l *lru[K, V]) resize(k K) {
	if e, ok := l.items[k]; ok {
		l.measure(e)
	}
}

func (l *lru[K, V]) measure(e *list.Element) {
	it := e.Value.(*lruItem[K, V])
	n := l.size(it.val)
	l.used += n - it.bytes
	it.bytes = n
	for l.used > l.max && l.order.Len() > 1 {
		l.evict(l.order.Back())
	}
}

func (l *lru[K, V]) remove(k K) {
	if e, ok := l.items[k]; ok {
		l.evict(e)
	}
}

func (l *lru[K, V]) evict(e *list.Element) {
	it := e.Value.(*lruItem[K, V])
	l.order.Remove(e)
	delete(l.items, it.key)
	l.used -= it.bytes
}

// bytes is what the held values measured last.
func (l *lru[K, V]) bytes() int64 { return l.used }
