package engine

import (
	"slices"
	"sync"

	"kvwin/kvcache"
)

// Chains remembers the hash chains of recent message lists, so a list
// that continues one it holds is hashed only past it. A hash chain names
// every prefix of a conversation (keys[i] names msgs[:i]), and a turn of a
// long conversation hashed all of its history to find the prefix a cache
// holds; a Responses chain's history is decoded once and grown a turn at
// a time, so its turns share the strings of the turns before, and Go's
// string comparison answers for a shared string without reading it.
//
// A list is compared message by message with the remembered one of the
// same owner and first message (which an owner's conversations rarely
// share), by value: a match means equal messages, so reuse never changes
// a key, only what it costs. Only lists of at least MinChainMessages are
// remembered (shorter ones hash in microseconds); at most maxChains lists
// and maxChainBytes of their text are held, the oldest let go first. Safe
// for concurrent use.
type Chains[K comparable] struct {
	mu    sync.Mutex
	held  map[chainSlot[K]]*chainEntry[K]
	order []chainSlot[K] // oldest first
	bytes int
}

// chainSlot is where a list is remembered: its owner's and its first
// message's key.
type chainSlot[K comparable] struct {
	owner string
	first K
}

type chainEntry[K comparable] struct {
	msgs  []Message
	keys  []K
	bytes int
	// version counts the entry's changes: a list compared with it is
	// appended to it only if it has not changed since (remember).
	version uint64
}

// MinChainMessages is the shortest list Chains remembers.
const MinChainMessages = 64

const (
	maxChains     = 256
	maxChainBytes = 64 << 20
)

// Keys returns keys[i], the chain of msgs[:i] from root (keys[0] = root),
// each step next(keys[i], msgs[i]); next must be a function of its
// arguments alone. owner keeps owners' lists apart (a tenant). The result
// is the caller's.
func (c *Chains[K]) Keys(owner string, root K, msgs []Message, next func(K, Message) K) []K {
	keys := make([]K, len(msgs)+1)
	keys[0] = root
	if len(msgs) == 0 {
		return keys
	}
	keys[1] = next(root, msgs[0])
	if c == nil || len(msgs) < MinChainMessages {
		for i := 1; i < len(msgs); i++ {
			keys[i+1] = next(keys[i], msgs[i])
		}
		return keys
	}
	slot := chainSlot[K]{owner: owner, first: keys[1]}
	from := 1
	c.mu.Lock()
	e := c.held[slot]
	var version uint64
	if e != nil {
		from = e.same(msgs)
		copy(keys[2:from+1], e.keys[2:from+1])
		version = e.version
	}
	c.mu.Unlock()
	for i := from; i < len(msgs); i++ {
		keys[i+1] = next(keys[i], msgs[i])
	}
	c.remember(slot, msgs, keys, e, version, from)
	return keys
}

// Same returns how many leading messages of msgs equal those of the list
// Keys last remembered for owner, root and msgs' first message: messages
// a caller already checked when it passed that list (0 if none is held).
func (c *Chains[K]) Same(owner string, root K, msgs []Message, next func(K, Message) K) int {
	if c == nil || len(msgs) < MinChainMessages {
		return 0
	}
	slot := chainSlot[K]{owner: owner, first: next(root, msgs[0])}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.held[slot]; e != nil {
		return e.same(msgs)
	}
	return 0
}

// same returns how many leading messages of msgs equal e's: at least the
// first, which names e's slot. Callers hold the Chains' lock.
func (e *chainEntry[K]) same(msgs []Message) int {
	n, same := min(len(e.msgs), len(msgs)), 1
	for same < n && e.msgs[same] == msgs[same] {
		same++
	}
	return same
}

// remember holds msgs and keys in slot, in place of what it held. If that
// is compared, the entry Keys compared msgs with at version, its first
// same messages equal msgs' and only the rest is copied (a turn adds a few
// messages to thousands).
func (c *Chains[K]) remember(slot chainSlot[K], msgs []Message, keys []K, compared *chainEntry[K], version uint64, same int) {
	size := func(ms []Message) (n int) {
		for _, m := range ms {
			n += len(m.Role) + len(m.Content)
		}
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[chainSlot[K]]*chainEntry[K]{}
	}
	e := c.held[slot]
	if e == nil || e != compared || e.version != version || same < 1 {
		// None, or changed since Keys compared (another request's): anew.
		if e != nil {
			c.bytes -= e.bytes
			c.order = slices.DeleteFunc(c.order, func(s chainSlot[K]) bool { return s == slot })
			delete(c.held, slot)
		}
		e, same = &chainEntry[K]{}, 0
	} else {
		c.order = slices.DeleteFunc(c.order, func(s chainSlot[K]) bool { return s == slot })
	}
	c.bytes -= size(e.msgs[same:])
	e.bytes -= size(e.msgs[same:])
	e.version++
	e.msgs = append(e.msgs[:same], msgs[same:]...)
	k := 0 // keys held: the root's and those of the same messages
	if same > 0 {
		k = same + 1
	}
	e.keys = append(e.keys[:k], keys[k:]...)
	e.bytes += size(msgs[same:])
	c.bytes += size(msgs[same:])
	if e.bytes > maxChainBytes/4 {
		c.bytes -= e.bytes
		delete(c.held, slot)
		return // one list may not take the room of the others
	}
	c.held[slot] = e
	c.order = append(c.order, slot)
	for len(c.order) > maxChains || c.bytes > maxChainBytes {
		s := c.order[0]
		c.order = c.order[1:]
		c.bytes -= c.held[s].bytes
		delete(c.held, s)
	}
}

// PromptKeys returns the prompt cache's keys of every prefix of msgs from
// root: keys[k] names msgs[:k] (kvcache.ChainKey.Next over each message).
// They come from one Chains for the process, so a turn that continues a
// recent long conversation (a Responses chain's, a gateway's) hashes only
// its new messages, and what it remembers is bounded once for every
// backend and engine (hashing a 4,000-message history was half of
// counting it). root keeps backends, renderers and tenants apart.
func PromptKeys(tenant string, root kvcache.ChainKey, msgs []Message) []kvcache.ChainKey {
	return promptKeys.Keys(tenant, root, msgs, nextKey)
}

var promptKeys Chains[kvcache.ChainKey]

func nextKey(k kvcache.ChainKey, m Message) kvcache.ChainKey { return k.Next(m.Role, m.Content) }
