package ttft

import (
	"errors"
	"strings"
)

// ErrNoTurns is returned by a loader whose file holds no user message.
var ErrNoTurns = errors.New("ttft: the workload has no user turn")

// folder turns a stream of chat messages into turns, the shape of the
// rule every loader shares:
//
//   - System messages before the first turn of the first conversation
//     become the system prompt (joined by a newline); any later ones are
//     dropped, since a chat has one system prompt and the harness replays
//     several source conversations as one.
//   - Consecutive messages of one role are joined by a newline: a turn is
//     one ask and one reply. A source conversation's last ask without a
//     reply is dropped, except in the last source conversation (the last
//     turn's reply is never sent).
//   - Assistant messages before the first user message of a source
//     conversation are dropped (there is no ask to reply to; appended to
//     the previous conversation's reply they would make a reply to an ask
//     it never answered); empty or whitespace-only texts are skipped, since
//     no client sends them.
//
// Source conversations are appended in order, so a file of many short
// chats (ShareGPT) still makes one long conversation.
type folder struct {
	c       Conversation
	started bool // a user message has been seen
	asked   bool // a user message has been seen in this source conversation
}

// begin starts a source conversation. The previous one's last ask is
// dropped if it got no reply: sent as history, its empty reply would be an
// invalid message.
func (f *folder) begin() {
	if n := len(f.c.Turns); n > 0 && f.c.Turns[n-1].Assistant == "" {
		f.c.Turns = f.c.Turns[:n-1]
	}
	f.asked = false
}

// add appends one message with role system, user or assistant.
func (f *folder) add(role, text string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	switch role {
	case roleSystem:
		if f.started {
			return
		}
		f.c.System = join(f.c.System, text)
	case roleUser:
		n := len(f.c.Turns)
		if f.asked && f.c.Turns[n-1].Assistant == "" {
			f.c.Turns[n-1].User = join(f.c.Turns[n-1].User, text)
			return
		}
		f.c.Turns = append(f.c.Turns, Turn{User: text})
		f.started, f.asked = true, true
	case roleAssistant:
		if !f.asked {
			return
		}
		t := &f.c.Turns[len(f.c.Turns)-1]
		t.Assistant = join(t.Assistant, text)
	}
}

// conversation returns what was folded. Every turn but possibly the last
// has a reply; the last turn's reply is never sent, so it may be empty.
func (f *folder) conversation() (Conversation, error) {
	if len(f.c.Turns) == 0 {
		return Conversation{}, ErrNoTurns
	}
	return f.c, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}
