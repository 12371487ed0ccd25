package window

import (
	"sort"

	"kvwin/engine"
)

// stepped replays the stepped eviction of docs/window.md (sink and memory)
// and returns the cut for the whole conversation. reserve is P (0 for sink);
// switchAt is the size up to which memory sends the conversation whole, or
// -1 for none; limit is the most the window may hold when its newest unit
// alone passes the budget (0: the budget). It is a pure function of its
// arguments.
func stepped(policy string, c conversation, s Settings, reserve, switchAt, limit int, r *resume) (Cut, error) {
	return replayFrom(policy, c, s, reserve, switchAt, limit, true, r)
}

// replay is stepped; with jump false it reads every message in turn,
// which the jumps must equal (FuzzCut compares the two).
func replay(policy string, c conversation, s Settings, reserve, switchAt, limit int, jump bool) (Cut, error) {
	return replayFrom(policy, c, s, reserve, switchAt, limit, jump, nil)
}

// replayState is where a replay stands once it has read a conversation's
// first n messages: all it carries from one message to the next. The
// replay reads nothing past a message to decide what it does there (the
// sinks aside, which end records), so the state is a function of those
// messages, their counts and the replay's settings: a longer conversation
// that begins with the same messages, counted the same way, passes
// through the same state there, and its replay may go on from it.
type replayState struct {
	n, end              int // the messages read; the sinks' end
	step, stepAt, start int // the Cut's Step, StepAt, Start
	ex, asks            int
	whole               bool
}

// resume carries a replay's states in and out of stepped: From, if set, is
// the state of the conversation's first From.n messages to go on from; the
// replay sets Marks to its states after all its messages but the last, and
// after all, and Marked once it has (the next turn re-sends the one or
// the other with more after it). Resumed reports that it went on from
// From (which a conversation whose sinks moved cannot).
type resume struct {
	From    *replayState
	Marks   [2]replayState
	Marked  bool
	Resumed bool
	before  bool // Marks[0] is set
}

// replayFrom is replay gone on from r.From (nil r: from the start); see
// resume.
func replayFrom(policy string, c conversation, s Settings, reserve, switchAt, limit int, jump bool, r *resume) (Cut, error) {
	onAsk := reserve > 0 && s.Packets == PacketsAsk
	n := len(c.msgs)
	end := sinkEnd(c, s)
	// From the first step on the sinks stand as they are once a step has
	// passed them (long messages as excerpts), padded.
	sinkTokens := c.size(0, end, end)
	padded := pad(sinkTokens, s.Block)
	cut := Cut{Policy: policy, Messages: n, Sinks: end, SinkTokens: c.tokens(0, end), Start: end, StepAt: -1, ExcerptRoom: c.room}
	high, low, mark := s.high(), s.low(), s.excerptMark()
	// asks: user messages since the latest step (memory); ex: the long
	// messages before it stand as excerpts (those a step has passed).
	whole, asks, ex, first := switchAt >= 0, 0, 0, end+1
	newestHeld := false // a step after the newest message kept it whole
	if f := r.goOn(end, n); f != nil {
		cut.Step, cut.StepAt, cut.Start = f.step, f.stepAt, f.start
		ex, asks, whole, first = f.ex, f.asks, f.whole, f.n+1
	}
	state := func(read int) replayState {
		return replayState{read, end, cut.Step, cut.StepAt, cut.Start, ex, asks, whole}
	}
	carry := c.carrier(end, padded, s)
	kept := func(i int) int { return padded + carry.tokens(cut.Start) + c.size(cut.Start, i, ex) }
	window := func(i int) int { return kept(i) + asks*reserve }
	if onAsk {
		// One packet at a time, on the latest ask: P is always reserved.
		window = func(i int) int { return kept(i) + reserve }
	}
	for i := first; i <= n; i++ {
		if jump && (reserve == 0 || onAsk) {
			// Between steps nothing changes but the window's size, which
			// only grows: go straight to the first message that may step.
			// (Under the ledger the size counts the asks; it is read
			// message by message.)
			i = c.nextStep(i, n, whole, cut.Step == 0, window,
				func(j int) bool { return onAsk && s.inQuestionZone(kept(j)) }, switchAt, reserve, high)
			if i > n {
				break
			}
		}
		if i == n {
			r.markBeforeLast(state(n - 1))
		}
		last := i - 1
		isAsk := c.msgs[last].Role == engine.RoleUser
		if whole {
			if c.tokens(0, i) <= switchAt {
				continue
			}
			whole = false // past the switch: this message is the first step
		} else {
			if isAsk {
				asks++
			}
			if cut.Step > 0 && window(i) <= high && !(onAsk && isAsk && cut.Start < c.lastUnit(last, end) && s.questionSteps(c, kept(i), last)) {
				continue
			}
			if cut.Step == 0 && window(i)-kept(i)+c.tokens(0, i) <= high {
				continue // before the first step nothing is padded or excerpted
			}
		}
		cut.Step++
		cut.StepAt = last
		// A step re-sends the kept history: the long messages it passes
		// become excerpts now, when it costs no reuse.
		ex, newestHeld = c.passed(last)
		asks = 0
		if isAsk && reserve > 0 {
			asks = 1
		}
		if window(i) <= mark {
			// Excerpting alone made the room: nothing is evicted, so the
			// kept history is not re-sent (docs/window.md, The cut rule).
			continue
		}
		floor := c.lastUnit(last, end)
		for cut.Start < floor && window(i) > low {
			cut.Start = nextUnit(c, cut.Start, floor)
		}
	}

	if first <= n {
		r.markLast(state(n), newestHeld)
	}
	if cut.Step == 0 {
		return unstepped(cut, c, s, limit)
	}
	cut.SinkTokens = sinkTokens
	cut.SinkPad = padded - sinkTokens
	cut.Carried = carry.positions(cut.Start)
	cut.KeptTokens = kept(n)
	cut.Excerpts = c.excerpts(c.excerpts(nil, 0, end, ex), cut.Start, n, ex)
	if cut.KeptTokens > s.Budget {
		// The latest unit alone (with the sinks) passes the budget: no
		// room for packets; it may still fit the context.
		return cut, fit(&cut, c, s, limit, ex)
	}
	s.placePackets(&cut, c, end, padded, reserve)
	return cut, nil
}

// passed returns where the excerpts of a step after message last reach
// (the long messages before ex stand as excerpts): past last itself if it
// is an answer (the model's own output) and not the request's newest
// message, which is always whole. An input, a user's or a tool's message,
// stays whole until the next step: a paste or a file read the answer
// after it works on. held reports an answer kept whole as the newest,
// which a later request, reading it as an older one, excerpts: the state
// after it is then not theirs to go on from (markLast).
func (c conversation) passed(last int) (ex int, held bool) {
	switch {
	case c.msgs[last].Role != engine.RoleAssistant:
		return last, false
	case last < len(c.msgs)-1:
		return last + 1, false
	}
	return last, true
}

// placePackets sets the asks of a settled cut that carry packets and their
// rooms (memory; reserve is P, 0 for sink): only the latest ask, with the
// room the window has left up to its cap, or under the ledger every ask
// since the step, P each.
func (s Settings) placePackets(cut *Cut, c conversation, sinkEnd, padded, reserve int) {
	n := len(c.msgs)
	switch {
	case reserve == 0:
		return
	case s.Packets == PacketsAsk:
		// The latest ask carries the packet; it may use the room the
		// window has left, up to the cap.
		for j := n - 1; j >= cut.Start; j-- {
			if c.msgs[j].Role == engine.RoleUser {
				cut.Asks = []int{j}
				break
			}
		}
		s.packetRooms(cut, c, sinkEnd, padded)
		return
	}
	cut.PacketRoom = reserve
	for j := cut.StepAt; j < n; j++ {
		if c.msgs[j].Role == engine.RoleUser {
			cut.Asks = append(cut.Asks, j)
		}
	}
	if need := cut.KeptTokens + len(cut.Asks)*reserve; need > s.Budget {
		// The ask's unit fits but not with full packet room: shrink the
		// room rather than fail, the packets are an extra.
		cut.PacketRoom = (s.Budget - cut.KeptTokens) / len(cut.Asks)
	}
}

// fit settles a cut whose sinks and latest unit pass the budget: the
// newest message (a paste, a long tool result) is sent whole, so the
// window may take the room the output reservation keeps, up to limit (the
// context less the request's max_tokens; 0: only the budget). Past it the
// first exchange yields its pin; past that, the newest message with the
// system messages and the rest of its unit cannot be sent: a TooLongError
// naming it. Long messages before ex stand as excerpts.
func fit(cut *Cut, c conversation, s Settings, limit, ex int) error {
	allowed := max(s.Budget, limit)
	if cut.KeptTokens <= allowed {
		return nil
	}
	n := len(c.msgs)
	if sys := systemEnd(c.msgs); cut.Sinks > sys {
		whole := c.tokens(0, sys) // system messages are never excerpted
		if kept := pad(whole, s.Block) + c.tokensOf(cut.Carried) + c.size(cut.Start, n, ex); kept <= allowed {
			cut.Sinks, cut.SinkTokens, cut.SinkPad, cut.KeptTokens = sys, whole, pad(whole, s.Block)-whole, kept
			cut.Excerpts = c.excerpts(nil, cut.Start, n, ex)
			if cut.Step == 0 {
				cut.Step, cut.StepAt = 1, n-1 // the first exchange is evicted: a step
			}
			return nil
		}
	}
	return &TooLongError{Policy: cut.Policy, Message: n - 1, MessageTokens: c.count[n-1],
		Tokens: cut.KeptTokens, Budget: allowed, Context: limit > s.Budget}
}

// packetRooms sets the rooms of the packet on the latest ask (cut.Asks[0])
// of a cut that holds cut.KeptTokens: a question asks for recall and may
// take the larger cap, larger still where the reuse allowance holds it,
// and then the fill may take all of it; a statement rarely needs old
// turns quoted back, and its packet, best hit included, stays within what
// the allowance leaves after the questions (see docs/window.md), 0 where
// it leaves nothing.
func (s Settings) packetRooms(cut *Cut, c conversation, sinkEnd, padded int) {
	cut.PacketFree = max(s.Budget-cut.KeptTokens, 0)
	question := len(cut.Asks) == 1 && isQuestion(c.msgs[cut.Asks[0]].Content)
	switch a := s.allowance(c, sinkEnd, padded); {
	case !question:
		cut.PacketFree = min(cut.PacketFree, a.Statement)
		cut.PacketRoom = min(s.packetCap(false), cut.PacketFree)
	case a.Holds:
		cut.PacketRoom = min(a.Question, cut.PacketFree)
		cut.FillRoom = cut.PacketRoom
	default:
		cut.PacketRoom = min(s.packetCap(true), cut.PacketFree)
	}
}

// questionSteps reports whether the ask at message last, with kept tokens
// in the window, steps it early (see docs/window.md, Packets): it is a
// question, the budget leaves it less free room than the question zone,
// and the window holds more than the low water mark (the caller checks
// that there is a unit before the ask's to evict).
func (s Settings) questionSteps(c conversation, kept, last int) bool {
	return s.inQuestionZone(kept) && isQuestion(c.msgs[last].Content)
}

// inQuestionZone reports whether a window holding kept tokens is where a
// question steps it early: the budget leaves it less free room than the
// question zone, and it holds more than the low water mark.
func (s Settings) inQuestionZone(kept int) bool {
	return s.Budget-kept < s.questionZone() && kept > s.low()
}

// nextStep returns the first message count j ≥ i (at most n+1) after which
// the replay may step, every count before it being one after which it
// does nothing (stepped): while sending the conversation whole, the first
// past switchAt; before the first step, the first whose tokens with the
// reserve pass high; after it, the first whose window passes high, or
// whose latest message is a question in the question zone (zone: only a
// question steps early there). The counts past high, and those in the
// zone, grow with j, so binary searches find where they begin: a replay
// costs about log n a step, and a look at each user message in the zone,
// not n binary searches (a 2,000-message history spends half its cycles
// in the zone).
func (c conversation) nextStep(i, n int, whole, first bool, window func(int) int, zone func(int) bool, switchAt, reserve, high int) int {
	search := func(past func(j int) bool) int {
		return i + sort.Search(n+1-i, func(k int) bool { return past(i + k) })
	}
	switch {
	case whole:
		return search(func(j int) bool { return c.tokens(0, j) > switchAt })
	case first:
		return search(func(j int) bool { return reserve+c.tokens(0, j) > high })
	}
	h := search(func(j int) bool { return window(j) > high })
	for j := search(zone); j < h; j++ {
		if m := c.msgs[j-1]; m.Role == engine.RoleUser && isQuestion(m.Content) {
			return j
		}
	}
	return h
}

// nextUnit returns the next unit boundary after from, at most floor.
func nextUnit(c conversation, from, floor int) int {
	for j := from + 1; j < floor; j++ {
		if c.unit[j] {
			return j
		}
	}
	return floor
}

// sliding drops the oldest units, one at a time as needed, so that the
// system messages and the rest fit the budget after every message. A step
// is any message after which something more was dropped.
func sliding(c conversation, s Settings) (Cut, error) {
	n := len(c.msgs)
	sys := systemEnd(c.msgs)
	if sys >= n {
		sys = n - 1
	}
	cut := Cut{Policy: PolicySliding, Messages: n, Sinks: sys, SinkTokens: c.tokens(0, sys), Start: sys, StepAt: -1}
	for i := sys + 1; i <= n; i++ {
		floor := c.lastUnit(i-1, sys)
		moved := false
		for cut.Start < floor && cut.SinkTokens+c.tokens(cut.Start, i) > s.Budget {
			cut.Start = nextUnit(c, cut.Start, floor)
			moved = true
		}
		if moved {
			cut.Step++
			cut.StepAt = i - 1
		}
	}
	cut.KeptTokens = cut.SinkTokens + c.tokens(cut.Start, n)
	if cut.KeptTokens > s.Budget {
		return Cut{}, &TooLongError{Policy: PolicySliding, Message: -1, Tokens: cut.KeptTokens, Budget: s.Budget}
	}
	return cut, nil
}

// full sends everything or fails.
func full(c conversation, s Settings) (Cut, error) {
	n := len(c.msgs)
	total := c.tokens(0, n)
	if total > s.Budget {
		return Cut{}, &TooLongError{Policy: PolicyFull, Message: -1, Tokens: total, Budget: s.Budget}
	}
	return Cut{Policy: PolicyFull, Messages: n, StepAt: -1, KeptTokens: total}, nil
}

// goOn is the state a replay of n messages whose sinks end at end goes on
// from: r.From where it stands past the sinks and before the last
// message; nil otherwise, and for a nil r.
func (r *resume) goOn(end, n int) *replayState {
	if r == nil || r.From == nil || r.From.end != end || r.From.n < end || r.From.n >= n {
		return nil
	}
	r.Resumed = true
	return r.From
}

// markBeforeLast records the state after all messages but the last.
func (r *resume) markBeforeLast(st replayState) {
	if r != nil {
		r.Marks[0], r.before = st, true
	}
}

// markLast records the state after all messages; a replay that jumped
// past the last message did nothing there, so the state before it is the
// same. held says a step after the last message kept it whole as the
// newest, which a longer list would have excerpted: the state after it
// is then only this request's, and the state before it stands for both.
func (r *resume) markLast(st replayState, held bool) {
	if r == nil {
		return
	}
	r.Marks[1], r.Marked = st, true
	switch {
	case held:
		r.Marks[1] = r.Marks[0] // the step at the last message read it: markBeforeLast ran
	case !r.before:
		r.Marks[0] = st
		r.Marks[0].n--
	}
}

// unstepped is the cut of a conversation no step has cut: all of it,
// fitted to limit when it passes the budget.
func unstepped(cut Cut, c conversation, s Settings, limit int) (Cut, error) {
	cut.KeptTokens = c.tokens(0, len(c.msgs))
	if cut.KeptTokens > s.Budget {
		return cut, fit(&cut, c, s, limit, 0)
	}
	return cut, nil
}
