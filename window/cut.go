package window

import "kvwin/engine"

// Cut is where a policy cuts one conversation: which messages are pinned,
// which are evicted, which asks own a packet. It holds positions and counts
// only; Window.Build turns it into messages.
//
// Invariants: 0 ≤ Sinks ≤ Start ≤ Messages−1 (the last message is always
// kept); messages [Sinks, Start) are evicted; every index in Asks is a user
// message in [Start, Messages) at or after the latest step, ascending.
type Cut struct {
	Policy     string
	Messages   int   // messages in the conversation
	Sinks      int   // messages [0, Sinks) are pinned
	SinkTokens int   // their tokens, unpadded
	SinkPad    int   // padding tokens to insert after the sinks (a block boundary)
	Start      int   // first kept message after the sinks
	Step       int   // eviction steps so far, by the replay of the package doc
	StepAt     int   // message at which the latest step happened; -1 if none
	Asks       []int // user messages that carry a packet (memory only)
	PacketRoom int   // tokens each ask's packet may take
	PacketFree int   // tokens the budget leaves free for packets: the best hit may use them past PacketRoom
	KeptTokens int   // sinks, padding and kept messages, without packets
	FillRoom   int   // a question's fill room past the relevance cutoff; 0: the default
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
	prefix []int  // prefix[i] = tokens of msgs[:i]
	unit   []bool // unit[i]: a unit starts at message i (after the sinks)
}

func newConversation(msgs []engine.Message, tokens []int) conversation {
	c := conversation{msgs: msgs, prefix: make([]int, len(msgs)+1), unit: make([]bool, len(msgs))}
	for i, t := range tokens {
		c.prefix[i+1] = c.prefix[i] + t
		c.unit[i] = msgs[i].Role == engine.RoleUser
	}
	return c
}

func (c conversation) tokens(from, to int) int { return c.prefix[to] - c.prefix[from] }

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

// sinks returns the end of the pinned messages and their unpadded and
// padded tokens, by the rule of the package doc.
func sinks(c conversation, s Settings) (end, tokens, padded int) {
	sys := systemEnd(c.msgs)
	end = sys
	users := 0
	for i := sys; i < len(c.msgs); i++ {
		if c.msgs[i].Role == engine.RoleUser {
			users++
			if users == 2 {
				if pad(c.tokens(0, i), s.Block) <= int(s.SinkShare*float64(s.Budget)) {
					end = i
				}
				break
			}
		}
	}
	if end >= len(c.msgs) {
		end = len(c.msgs) - 1 // the ask is never a sink
	}
	tokens = c.tokens(0, end)
	return end, tokens, pad(tokens, s.Block)
}

func pad(tokens, block int) int {
	if block <= 1 {
		return tokens
	}
	return (tokens + block - 1) / block * block
}
