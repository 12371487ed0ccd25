package kvcache

// lruList orders a backend's non-empty slots by last use, most recent at the
// head. It is intrusive (the links live in slot) so touching a slot on every
// request allocates nothing.
type lruList struct {
	head, tail *slot
	n          int // slots listed
}

// touch moves s to the head, adding it if absent.
func (l *lruList) touch(s *slot) {
	if l.head == s {
		return
	}
	l.remove(s)
	s.next = l.head
	if l.head != nil {
		l.head.prev = s
	}
	l.head = s
	if l.tail == nil {
		l.tail = s
	}
	s.listed = true
	l.n++
}

// remove takes s out of the list; a slot not listed is left alone.
func (l *lruList) remove(s *slot) {
	if !s.listed {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next, s.listed = nil, nil, false
	l.n--
}

// evict trims b's chains until b fits its capacity: the least recently used
// chain first, and within a chain its tail before its head, because the head
// (a system prompt, the sinks of a window) is what other requests share and
// the tail is what only this conversation's next turn would reuse. A chain
// is trimmed only as far as needed. mu is held for writing.
func (r *Registry) evict(b *backend) {
	for b.capacity > 0 && b.held > b.capacity {
		s := b.lru.tail
		n := min(len(s.keys), b.held-b.capacity)
		s.evictions.Add(uint64(n))
		// Trimming keeps s where it is in the list: it is still the least
		// recently used, so the next round trims it further before another.
		b.held -= n
		r.setChain(&s.chain, s.keys[:len(s.keys)-n])
		if len(s.keys) == 0 {
			b.lru.remove(s)
		}
	}
}
