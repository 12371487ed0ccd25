package kvcache

// Overlap returns how many blocks loc holds and how many of them are the
// first blocks of keys, without copying what it holds: the router asks it
// of every slot of every backend for every turn.
func (r *Registry) Overlap(loc Location, keys []Key) (held, shared int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b := r.backends[loc.Backend]; b != nil {
		if s := b.slots[loc.Slot]; s != nil {
			return len(s.keys), commonPrefix(s.keys, keys)
		}
	}
	return 0, 0
}
