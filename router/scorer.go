package router

import (
	"github.com/cespare/xxhash/v2"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Scorers from outside the router (Config.Scorer): the routing rules of
// other routers, run over this router's fleet for side by side comparison
// (kvwin bench fleet's peers). They rank the same candidates the router's
// own policies do, from what the estimate says of each, and choose no
// slot: the backend (or the tenant pin) places the turn.

// Scorer is a routing policy the router's caller brings: Rank orders a
// turn's candidates, best first, and the attempt loop walks that order.
// It returns cands reordered, perhaps fewer of them; a Candidate not from
// cands is dropped. It reads no clock: what it ranks by is in the
// candidates and the prompt, so a simulated fleet scores alike. Rank is
// called once per turn, under the router's plan lock; it must be safe for
// concurrent use with Tracker's methods.
type Scorer interface {
	Rank(cands []Candidate, p Prompt) []Candidate
}

// Tracker is a Scorer that follows the turns it ranked, found by type
// assertion on Config.Scorer: Watch wraps the turn's stream (its first
// event is the first token; stream may be nil), and Ended is called once
// the turn is over, answered or not.
type Tracker interface {
	Watch(p Prompt, stream engine.StreamFunc) engine.StreamFunc
	Ended(p Prompt)
}

// Candidate is one backend as a Scorer sees it for one turn.
type Candidate struct {
	Name  string
	Load  int // requests in flight: the router's, or what the backend's journal says, the more
	Slots int // parallel slots, at least 1
	Cells int // KV cells of all its slots (slots × context per slot); 0 unknown
	// Matched is the prompt tokens the registry says it holds anywhere
	// (a slot or a snapshot), before any slot plan.
	Matched int
	// MatchedTier is where Matched is held: "slot" (a live slot: a GPU's
	// KV), "ram" or "disk" (a node's published snapshot tier, docs/fleet.md);
	// "" nowhere. MatchedSlot is, of the prompt, what a live slot holds: a
	// router that sees no lower tier (llm-d's prefix index, llm-d #1650)
	// would know only that.
	MatchedTier string
	MatchedSlot int
	// PeakPrefill is its cold prefill throughput, tokens/s, over a chunk
	// of peakChunk tokens, by its calibrated cost model (or the one it
	// borrows until it has measured its own); 0 unknown.
	PeakPrefill float64

	at int // 1 + its index in the router's candidates; 0: not the router's
}

// Prompt is a turn as a Scorer sees it.
type Prompt struct {
	Length int // tokens
	// Keys are its block keys: exact when a backend rendered its tokens,
	// else approximate (over text); BlockTokens is the tokens per key.
	Keys        []kvcache.Key
	BlockTokens int
	ID          uint64 // the turn's sequence number in this router
}

// peakChunk is the chunk whose cold prefill time gives a backend's peak
// prefill throughput (Candidate.PeakPrefill): llama-server's default
// logical batch (--batch-size 2048), where llm-d measures vLLM's
// max_num_batched_tokens.
const peakChunk = 2048

// Rendezvous is the highest-random-weight score of the backend named name
// for key: the router's policies break ties by it, highest first, so one
// key goes to one backend while the fleet stays the same; a Scorer may
// break its ties alike.
func Rendezvous(key uint64, name string) uint64 {
	h := xxhash.New()
	var b [8]byte
	for i := range b {
		b[i] = byte(key >> (8 * i))
	}
	h.Write(b[:])
	h.WriteString(name)
	return h.Sum64()
}

// external is a Scorer as the router's scorer.
type external struct{ s Scorer }

var _ scorer = external{}

func (e external) rank(cands []candidate, p prompt) []candidate {
	pub := make([]Candidate, len(cands))
	for i, c := range cands {
		pub[i] = Candidate{Name: c.name, Load: c.load, Slots: c.slots, Cells: c.cells, Matched: c.matched, MatchedTier: c.matchedTier, MatchedSlot: c.matchedSlot, PeakPrefill: c.peak, at: i + 1}
	}
	ranked := e.s.Rank(pub, p.public())
	out := make([]candidate, 0, len(ranked))
	for _, c := range ranked {
		if c.at > 0 && c.at <= len(cands) {
			out = append(out, cands[c.at-1])
		}
	}
	return out
}

// public is p as a Scorer sees it.
func (p prompt) public() Prompt {
	return Prompt{Length: p.length, Keys: p.keys, BlockTokens: p.block, ID: p.id}
}
