package window

import "kvwin/engine"

// ReuseTarget is the cached share of its prompt tokens a memory window
// aims to keep over a conversation's turns (see docs/window.md, The reuse
// allowance): the share the caps are derived from.
const ReuseTarget = 0.85

// questionShare is the share of asks the reuse allowance assumes are
// questions at the question cap before a conversation shows its own (the
// docs/window.md's one ask in three): the prior of the conversation's
// estimate, worth questionPrior asks.
const questionShare = 1.0 / 3

// questionPrior is the weight, in asks, of questionShare in the estimate
// of a conversation's share of questions: three asks, one a question.
// Past a few tens of asks the conversation's own share decides.
const questionPrior = 3

// allowance is the reuse arithmetic of one conversation at one budget (see
// docs/window.md, The reuse allowance), in tokens per turn.
type allowance struct {
	Ask      float64 // a: the mean user message, uncached on its turn
	Exchange float64 // g: the mean unit (a user message and its replies)
	Steps    float64 // σ: what eviction steps re-send, per turn
	Window   float64 // W̄: the mean window between the water marks
	// Spare is (1−ReuseTarget)·W̄ − a − σ: what packets may cost a turn
	// at the target. Each packet costs its tokens on its turn and g on the
	// next (its ask and the answer are sent again without it).
	Spare float64
	// Statement is the most tokens a statement's packet may take: what
	// Spare leaves after the questions' share at the question cap, spread
	// over the other asks, less the g each packet costs again. 0: none.
	Statement int
	// Holds says Spare holds the questions at the question cap
	// (PacketCap·B, a share q of the asks); Question is then the cap they may
	// grow to with all of Spare, at most B − L (PacketCap·B if not).
	Holds    bool
	Question int
}

// questionWindow is how many of the latest asks a conversation's share of
// questions is read from: enough for a share of one in ten to within
// about two points (the binomial's standard error), and a bound on the
// text read per turn whatever the history's length.
const questionWindow = 256

// questionShare returns q, the share of c's latest asks (user messages
// after from, at most questionWindow) that are questions, with the prior's
// questionShare worth questionPrior asks (see docs/window.md).
func (c conversation) questionShare(from int) float64 {
	asks, questions := 0, 0
	for i := len(c.msgs) - 1; i >= from && asks < questionWindow; i-- {
		if c.msgs[i].Role == engine.RoleUser {
			asks++
			if isQuestion(c.msgs[i].Content) {
				questions++
			}
		}
	}
	return (float64(questions) + questionShare*questionPrior) / float64(asks+questionPrior)
}

// allowance computes the reuse arithmetic of c's messages after the sinks
// (from) with the sinks padded to padded tokens. It is a pure function of
// the messages' token counts and the settings, so every replica agrees.
func (s Settings) allowance(c conversation, from, padded int) allowance {
	users, userTokens := 0, 0
	for i := from; i < len(c.msgs); i++ {
		if c.msgs[i].Role == engine.RoleUser {
			users++
			userTokens += c.tokens(i, i+1)
		}
	}
	if users == 0 {
		return allowance{}
	}
	var a allowance
	a.Ask = float64(userTokens) / float64(users)
	q := c.questionShare(from)
	a.Exchange = float64(c.tokens(from, len(c.msgs))) / float64(users)
	high, low, p := float64(s.high()), float64(s.low()), float64(s.packetTokens())
	a.Window = (low + high - p) / 2
	span := high - p - low // the tokens a window grows by between steps
	if span <= 0 {
		return a // a step every turn: nothing to spare
	}
	if z := float64(s.questionZone()); z > p {
		// A question finding less free room than the zone steps early:
		// once the window is in the zone, one ask in 1/q is a question,
		// so it grows about that many units into it.
		span = min(span, high-z-low+a.Exchange/q)
	}
	a.Steps = a.Exchange * max(low-float64(padded), 0) / span
	a.Spare = (1-ReuseTarget)*a.Window - a.Ask - a.Steps
	// Questions first: they are what asks for recall. Where Spare holds
	// them at the question cap, their cap grows with the rest of it, up
	// to the free room a step leaves (B − L); statements get what that
	// leaves.
	capQ := float64(s.packetCap(true))
	a.Holds = a.Spare >= q*(capQ+a.Exchange)
	grown := capQ
	if a.Holds {
		grown = min(a.Spare/q-a.Exchange, max(float64(s.Budget-s.low()), capQ))
	}
	a.Question = int(grown)
	spent := q * (grown + a.Exchange)
	room := (a.Spare-spent)/(1-q) - a.Exchange
	a.Statement = int(min(max(room, 0), float64(s.packetCap(false))))
	return a
}
