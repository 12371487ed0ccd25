package kvcache

import "slices"

// chain is one location's hold: a slot's or a snapshot's keys.
type chain struct {
	keys    []Key
	rootPos int       // position in roots[keys[0]]; -1 while keys is empty
	b       *backend  // owner
	slot    *slot     // the slot holding it, nil for a snapshot
	snap    *snapshot // the snapshot holding it, nil for a slot
}

// index lists the chains by their first key. Because a key names its whole
// prefix, this is all Lookup needs: a chain that does not start with the
// looked-up chain's first key holds none of it, and for one that does, the
// common prefix is found by binary search (commonPrefix). An index of every
// key would cost a map entry per block; this one costs a pointer per chain.
type index map[Key][]*chain

func (x index) add(c *chain) {
	k := c.keys[0]
	c.rootPos = len(x[k])
	x[k] = append(x[k], c)
}

func (x index) remove(c *chain) {
	k := c.keys[0]
	list := x[k]
	last := len(list) - 1
	list[c.rootPos] = list[last]
	list[c.rootPos].rootPos = c.rootPos
	list[last] = nil
	if last == 0 {
		delete(x, k)
	} else {
		x[k] = list[:last]
	}
	c.rootPos = -1
}

// setChain makes c hold a copy of keys, keeping the index right. keys may be
// a prefix of c.keys. mu is held for writing.
func (r *Registry) setChain(c *chain, keys []Key) {
	if c.rootPos >= 0 && (len(keys) == 0 || keys[0] != c.keys[0]) {
		r.roots.remove(c)
	}
	switch {
	case len(keys) == 0:
		c.keys = nil // a released chain gives its memory back
	case cap(c.keys) >= len(keys):
		c.keys = c.keys[:len(keys)]
		copy(c.keys, keys)
	default:
		c.keys = slices.Clone(keys)
	}
	if len(c.keys) > 0 && c.rootPos < 0 {
		r.roots.add(c)
	}
}

// SharedPrefix is the number of leading elements a and b share: of block
// keys (chained, so equal keys at i mean equal blocks up to i) or of
// tokens. It compares one by one, so it holds for any two slices; the
// registry's own lookups use commonPrefix, a binary search that relies on
// the chaining.
func SharedPrefix[T comparable](a, b []T) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// commonPrefix returns how many leading keys a and b share. Keys are chained,
// so once two chains differ they differ at every later block: equality is
// monotone and a binary search finds the first gap in O(log n). A 64-bit
// collision could break monotonicity; docs/registry.md says why that only
// costs a routing choice.
func commonPrefix(a, b []Key) int {
	n := min(len(a), len(b))
	if n == 0 || a[0] != b[0] {
		return 0
	}
	if a[n-1] == b[n-1] {
		return n // the common case for a returning conversation
	}
	// All keys before lo are equal, the key at hi differs.
	lo, hi := 1, n-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if a[mid] == b[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
