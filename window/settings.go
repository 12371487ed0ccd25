package window

import (
	"fmt"

	"kvwin/engine"
)

// Counter returns the tokens a message takes in the prompt. The server
// passes exact counts from the backend's tokenizer (template overhead
// included); offline tools use ApproxCount. It must be deterministic.
type Counter func(engine.Message) int

// ApproxCount is ceil(UTF-8 bytes / 4) of the content, the convention of
// ../shared/data/README.md when no tokenizer is at hand.
func ApproxCount(m engine.Message) int { return engine.EstimateTokens(len(m.Content)) }

// Settings are the parameters of the cut rule (see docs/window.md). The
// zero value of every field but Budget means its default.
type Settings struct {
	// Budget is the tokens a window may hold: the per-slot context minus
	// the output reservation. Required.
	Budget int
	// Block is the KV block size sinks are padded to. Default 16.
	Block int
	// High and Low are the water marks as shares of Budget: a step happens
	// when the window would pass High·Budget and evicts down to
	// Low·Budget. Defaults 1 and 0.5.
	High, Low float64
	// SinkShare is the largest share of Budget the padded sinks may take
	// with the first exchange; past it only the system prompt is pinned.
	// Default 0.5.
	SinkShare float64
	// Switch (memory) is the conversation size, in tokens, up to which it
	// is sent whole. Default Budget; at most Budget.
	Switch int
	// Packets (memory) is where packets live: PacketsAsk (default), only on
	// the latest ask, recomputed each turn; or PacketsLedger, one per ask
	// since the latest step, each kept until the next step.
	Packets string
	// PacketShare (memory) is the share of Budget the replay reserves for
	// a packet (for each ask since the step, under PacketsLedger).
	// Default 1/16.
	PacketShare float64
	// PacketCap (memory, PacketsAsk) is the share of Budget the packet of
	// a question (see isQuestion) may take when the window has room for
	// it, and more where the reuse allowance holds it (up to B − L).
	// Default 1/4 (see docs/window.md for the rule).
	PacketCap float64
	// StatementCap (memory, PacketsAsk) is the share of Budget the packet
	// of an ask that is not a question may take. Default 1/16, the room P
	// every window reserves (at most PacketCap). At most PacketCap.
	StatementCap float64
	// MessageShare (sink and memory) is the share of Budget one message
	// may take once a step has passed it, up to longTurnTokens: a longer
	// one (but a system message) then stands as its excerpt of
	// minExcerpt tokens (docs/window.md, Long messages). Default Low/4:
	// the kept history a step leaves (Low·Budget, less the sinks) holds at
	// least four such messages.
	MessageShare float64
	// K (memory) bounds the turns of one packet. Default B/4 (256 at
	// 1,024 tokens): a turn in a packet takes at least about four tokens
	// (its speaker, a word, the line's end), and no packet takes more
	// than the budget, so the token room stays the real bound, whatever
	// the turns' length. A fixed bound would not: 64 chat messages of ten
	// tokens are 640 of a question's 3,072-token cap at 12,288, and past
	// them K, not the room, cut the packet.
	K int
}

// Defaults returns s with every unset field at its default.
func (s Settings) Defaults() Settings {
	if s.Block == 0 {
		s.Block = 16
	}
	if s.High == 0 {
		s.High = 1
	}
	if s.Low == 0 {
		s.Low = 0.5
	}
	if s.SinkShare == 0 {
		s.SinkShare = 0.5
	}
	if s.Switch == 0 {
		s.Switch = s.Budget
	}
	if s.Packets == "" {
		s.Packets = PacketsAsk
	}
	if s.PacketShare == 0 {
		s.PacketShare = 1.0 / 16
	}
	if s.PacketCap == 0 {
		s.PacketCap = 1.0 / 4
	}
	if s.StatementCap == 0 {
		s.StatementCap = min(1.0/16, s.PacketCap)
	}
	if s.K == 0 {
		s.K = max(s.Budget/4, 1)
	}
	if s.MessageShare == 0 {
		s.MessageShare = s.Low / 4
	}
	return s
}

// Validate reports the first setting out of range, wrapping ErrSettings.
func (s Settings) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSettings, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Budget < 1:
		return bad("budget %d: must be at least 1 token", s.Budget)
	case s.Block < 1:
		return bad("block %d: must be at least 1", s.Block)
	case s.High <= 0 || s.High > 1:
		return bad("high water mark %v: must be in (0, 1]", s.High)
	case s.Low <= 0 || s.Low >= s.High:
		return bad("low water mark %v: must be in (0, high=%v)", s.Low, s.High)
	case s.SinkShare <= 0 || s.SinkShare > 1:
		return bad("sink share %v: must be in (0, 1]", s.SinkShare)
	case s.Switch < 0 || s.Switch > s.Budget:
		return bad("switch %d: must be in [0, budget=%d]", s.Switch, s.Budget)
	case s.PacketShare < 0 || s.PacketShare >= s.Low:
		return bad("packet share %v: must be in [0, low=%v)", s.PacketShare, s.Low)
	case s.Packets != PacketsAsk && s.Packets != PacketsLedger:
		return bad("packets %q: want %q or %q", s.Packets, PacketsAsk, PacketsLedger)
	case s.PacketCap < 0 || s.PacketCap > 1-s.Low:
		return bad("packet cap %v: must be in [0, 1-low=%v]", s.PacketCap, 1-s.Low)
	case s.StatementCap < 0 || s.StatementCap > s.PacketCap:
		return bad("statement cap %v: must be in [0, packet cap=%v]", s.StatementCap, s.PacketCap)
	case s.MessageShare <= 0 || s.MessageShare > 1:
		return bad("message share %v: must be in (0, 1]", s.MessageShare)
	case s.K < 0:
		return bad("k %d: must not be negative", s.K)
	}
	return nil
}

// Where packets live (Settings.Packets).
const (
	PacketsAsk    = "ask"
	PacketsLedger = "ledger"
)

// packetCap is the most tokens the packet of one ask may take
// (PacketsAsk): PacketCap of Budget for a question, StatementCap for any
// other ask, never less than the reserved room P.
func (s Settings) packetCap(question bool) int {
	share := s.StatementCap
	if question {
		share = s.PacketCap
	}
	return max(int(share*float64(s.Budget)), s.packetTokens())
}

// questionZone is the free room a question's packet is always given: a
// question that finds less steps the window early (see docs/window.md,
// Packets). The question cap, but at most half the span a window grows
// by between the water marks, so that a step always leaves it.
func (s Settings) questionZone() int { return min(s.packetCap(true), (s.high()-s.low())/2) }

// fillTokens is the most a question's packet may take past the relevance
// cutoff (memory.Query.FillTokens): B/8, the uniform cap of the package
// doc, at which even a packet that filled it every turn would stay near
// the reuse target. The cutoff's hits take the question's cap first.
// Where the reuse allowance holds the questions at their cap, the replay
// sets a larger fill (Cut.FillRoom: the question's whole room).
func (s Settings) fillTokens() int { return s.Budget / 8 }

// packetTokens is P, the room reserved for each ask's packet.
func (s Settings) packetTokens() int { return int(s.PacketShare * float64(s.Budget)) }

// longMessage is the tokens past which a message is long: MessageShare of
// Budget, at most longTurnTokens, at least minExcerpt.
func (s Settings) longMessage() int {
	return max(min(int(s.MessageShare*float64(s.Budget)), longTurnTokens), minExcerpt)
}

func (s Settings) high() int { return int(s.High * float64(s.Budget)) }
func (s Settings) low() int  { return int(s.Low * float64(s.Budget)) }

// excerptMark is the most a step may leave in the window by excerpting
// alone: if the long messages it passes, as excerpts, bring the window to
// it, the step evicts nothing; otherwise it evicts down to the low water
// mark, re-sending the kept history. Halfway between the marks: half the
// band for the excerpted history to grow into, half for whole turns to
// arrive in. A step that excerpts nothing leaves the window above the mark
// (a step happens past High, a question's early one past B − Z ≥ the
// mark), so where nothing is long this never applies.
func (s Settings) excerptMark() int { return (s.high() + s.low()) / 2 }
