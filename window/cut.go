package window

import (
	"slices"

	"kvwin/engine"
)

// Cut is where a policy cuts one conversation: which messages are pinned,
// which are evicted, which asks own a packet. It holds positions and counts
// only; Window.Build turns it into messages.
//
// Invariants: 0 ≤ Sinks ≤ Start ≤ Messages−1 (the last message is always
// kept); messages [Sinks, Start) are evicted; every index in Asks is a user
// message in [Start, Messages) at or after the latest step, ascending.
type Cut struct {
	Policy     string
	Messages   int // messages in the conversation
	Sinks      int // messages [0, Sinks) are pinned
	SinkTokens int // their tokens, unpadded
	SinkPad    int // padding tokens to insert after the sinks (a block boundary)
	Start      int // first kept message after the sinks
	// Carried are the system messages before Start that stay in the
	// window, whole, between the sinks and Start (ascending; see
	// docs/window.md, System messages).
	Carried    []int
	Step       int   // eviction steps so far, by the replay of docs/window.md
	StepAt     int   // message at which the latest step happened; -1 if none
	Asks       []int // user messages that carry a packet (memory only)
	PacketRoom int   // tokens each ask's packet may take
	PacketFree int   // tokens the budget leaves free for packets: the best hit may use them past PacketRoom
	KeptTokens int   // sinks, padding and kept messages, without packets
	FillRoom   int   // a question's fill room past the relevance cutoff; 0: the default
	// Excerpts are the pinned and kept messages that stand as excerpts
	// (sink and memory: a message longer than its share, once a step has
	// passed it; see docs/window.md), ascending by position.
	Excerpts []Excerpt
	// ExcerptRoom is the tokens each excerpt is cut to.
	ExcerptRoom int
}

// Evicted returns the number of evicted messages.
func (c Cut) Evicted() int { return c.Start - c.Sinks }

// EvictedPositions returns the evicted messages as the range [from, to) of
// positions in the conversation; a named conversation's store holds them.
func (c Cut) EvictedPositions() (from, to int) { return c.Sinks, c.Start }

// Whole reports whether nothing is evicted.
func (c Cut) Whole() bool { return c.Start == c.Sinks && c.Step == 0 }

// conversation is the precomputed shape a replay walks.
type conversation struct {
	msgs   []engine.Message
	count  []int  // count[i] = tokens of msgs[i], whole
	prefix []int  // prefix[i] = tokens of msgs[:i]
	unit   []bool // unit[i]: a unit starts at message i (after the sinks)
	// long[i]: msgs[i] stands as an excerpt once a step has passed it;
	// short[i] = tokens of msgs[:i] with every long message as its excerpt.
	long  []bool
	short []int
	room  int // the excerpt's tokens; 0: nothing is long
}

// newConversation precomputes the shape of msgs with their tokens. A
// message other than a system message with more than long tokens is long
// and counts room tokens as its excerpt (long 0: none is). The arrays are
// built in the memory of c's where they are large enough (a long
// history's cut is taken every turn).
func newConversation(c conversation, msgs []engine.Message, tokens []int, long, room int) conversation {
	n := len(msgs)
	c = conversation{msgs: msgs, count: tokens, prefix: grow(c.prefix, n+1), unit: grow(c.unit, n),
		long: grow(c.long, n), short: grow(c.short, n+1)}
	if long > 0 {
		c.room = room
	}
	for i, t := range tokens {
		c.prefix[i+1] = c.prefix[i] + t
		c.unit[i] = msgs[i].Role == engine.RoleUser
		if long > 0 && t > long && msgs[i].Role != engine.RoleSystem {
			if r := excerptRoom(msgs[i].Content, i, t, room); t > r {
				c.long[i], t = true, r
			}
		}
		c.short[i+1] = c.short[i] + t
	}
	return c
}

// tokens returns the tokens of msgs[from:to], whole.
func (c conversation) tokens(from, to int) int { return c.prefix[to] - c.prefix[from] }

// size returns the tokens of msgs[from:to] as a window sends them when the
// long messages before ex stand as excerpts.
func (c conversation) size(from, to, ex int) int {
	if ex <= from {
		return c.tokens(from, to)
	}
	if ex >= to {
		return c.short[to] - c.short[from]
	}
	return c.short[ex] - c.short[from] + c.tokens(ex, to)
}

// excerpts returns the long messages in [from, to) before ex.
func (c conversation) excerpts(out []Excerpt, from, to, ex int) []Excerpt {
	for i := from; i < min(to, ex); i++ {
		if c.long[i] {
			out = append(out, Excerpt{Pos: i, Tokens: c.count[i]})
		}
	}
	return out
}

// lastUnit returns the start of the unit holding message i: the latest unit
// boundary at or before i, but not before floor.
func (c conversation) lastUnit(i, floor int) int {
	for j := i; j > floor; j-- {
		if c.unit[j] {
			return j
		}
	}
	return floor
}

// systemEnd returns the number of leading system messages.
func systemEnd(msgs []engine.Message) int {
	n := 0
	for n < len(msgs) && msgs[n].Role == engine.RoleSystem {
		n++
	}
	return n
}

// sinkEnd returns the end of the pinned messages, by the rule of
// docs/window.md.
func sinkEnd(c conversation, s Settings) int {
	sys := systemEnd(c.msgs)
	end := sys
	users := 0
	for i := sys; i < len(c.msgs); i++ {
		if c.msgs[i].Role == engine.RoleUser {
			users++
			if users == 2 {
				// Measured as they stand once a step has passed them: the
				// sinks are padded and pinned from the first step on.
				if pad(c.size(0, i, i), s.Block) <= int(s.SinkShare*float64(s.Budget)) {
					end = i
				}
				break
			}
		}
	}
	return min(end, len(c.msgs)-1) // the ask is never a sink
}

func pad(tokens, block int) int {
	if block <= 1 {
		return tokens
	}
	return (tokens + block - 1) / block * block
}

// carrier keeps the system (and developer) messages a step passes: after
// the sinks, newest first, while with the padded sinks they take at most
// SinkShare·B; older ones are evicted like any message (docs/window.md,
// System messages).
type carrier struct {
	c    conversation
	mids []int // system messages after the sinks, ascending
	room int
	// at, held: the latest start asked about and its tokens (the replay
	// asks about the same start many times).
	at, held int
}

func (c conversation) carrier(end, padded int, s Settings) *carrier {
	var mids []int
	for i := end; i < len(c.msgs); i++ {
		if c.msgs[i].Role == engine.RoleSystem {
			mids = append(mids, i)
		}
	}
	return &carrier{c: c, mids: mids, room: int(s.SinkShare*float64(s.Budget)) - padded, at: -1}
}

// walk calls fn with each carried message before start, newest first, and
// its tokens.
func (k *carrier) walk(start int, fn func(pos int)) int {
	total := 0
	for j := len(k.mids) - 1; j >= 0; j-- {
		pos := k.mids[j]
		if pos >= start {
			continue
		}
		if total+k.c.count[pos] > k.room {
			break
		}
		total += k.c.count[pos]
		if fn != nil {
			fn(pos)
		}
	}
	return total
}

// tokens is what the messages carried past start take.
func (k *carrier) tokens(start int) int {
	if len(k.mids) == 0 {
		return 0
	}
	if start != k.at {
		k.at, k.held = start, k.walk(start, nil)
	}
	return k.held
}

// positions are the messages carried past start, ascending.
func (k *carrier) positions(start int) []int {
	var out []int
	k.walk(start, func(pos int) { out = append(out, pos) })
	slices.Reverse(out)
	return out
}

// tokensOf sums the whole tokens of the messages at positions.
func (c conversation) tokensOf(positions []int) int {
	t := 0
	for _, p := range positions {
		t += c.count[p]
	}
	return t
}

// grow returns xs resized to n, zeroed, in its own memory where it has the
// capacity. New memory has room for a quarter more: a conversation's cut
// is taken every turn on a history a turn longer, and memory of exactly n
// was new memory every turn (100 KB a turn at 4,000 messages).
func grow[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n, n+n/4)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}
