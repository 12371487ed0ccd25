package window

import (
	"kvwin/engine"
	"kvwin/window/memory"
)

// replays remembers where recent long histories' replays stood (see
// replayState), so a turn that re-sends a history with a message or two
// changed or added replays only those: the cut of a 2,000-message history
// replayed all of it every turn, reading every question zone's asks
// again. A mark is taken up only for a list that begins with the very
// messages it was taken on (compared by value) under the same policy and
// counter: the cut is the one a replay from the start gives (FuzzResume).
type replays = memo[replayKey, *replayMarks]

// replayKey names a history's marks: its owner, the policy and counter
// its replay ran under, and the chain (linkNext) of its first two messages
// (a system prompt alone is shared by many conversations).
type replayKey struct {
	owner    memory.Key
	policy   string
	countKey string
	head     uint64
}

// replayMarks are a replay's states after all but the last of msgs and
// after all, and the messages they were taken on (the request's own,
// held, not copied).
type replayMarks struct {
	msgs   []engine.Message
	states [2]replayState
}

// DefaultReplayBytes bounds the histories whose replays a Window
// remembers, by the bytes of their messages: a hundred 2,000-message
// histories of short messages, or six of 100,000 tokens. The messages
// are the requests' own, most of them also held by the window's chains.
const DefaultReplayBytes = 64 << 20

// minReplayMessages is the shortest history whose replay is remembered:
// a shorter one replays in a few microseconds, as fast as the messages
// are compared.
const minReplayMessages = engine.MinChainMessages

func replayBytes(m *replayMarks) int64 {
	n := int64(96)
	for _, msg := range m.msgs {
		n += int64(len(msg.Role)+len(msg.Content)) + 32
	}
	return n
}

func newReplayKey(req Request, policy string) (replayKey, bool) {
	if len(req.Messages) < minReplayMessages || req.CountKey == "" {
		return replayKey{}, false
	}
	head := linkNext(linkNext(0, req.Messages[0]), req.Messages[1])
	return replayKey{owner: req.Owner, policy: policy, countKey: req.CountKey, head: head}, true
}

// resumeFor returns the resume of a replay of msgs under k: from the
// latest mark taken on messages msgs begins with, if any.
func (w *Window) resumeFor(k replayKey, msgs []engine.Message) *resume {
	r := &resume{}
	m, ok := w.replays.get(k)
	if !ok {
		return r
	}
	same := 0
	for same < min(len(msgs), len(m.msgs)) && msgs[same] == m.msgs[same] {
		same++
	}
	for i := len(m.states) - 1; i >= 0; i-- {
		if st := m.states[i]; st.n <= same {
			r.From = &st
			break
		}
	}
	return r
}

// remember keeps r's marks of msgs under k.
func (w *Window) remember(k replayKey, msgs []engine.Message, r *resume) {
	if r.Resumed {
		w.resumed.Add(1)
	}
	if r.Marked {
		w.replays.put(k, k.owner, &replayMarks{msgs: msgs, states: r.Marks})
	}
}
