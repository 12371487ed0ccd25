package memory

import (
	"fmt"
	"kvwin/internal/ident"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Turn is one message of a conversation as the memory holds it.
type Turn struct {
	Pos    int       // index of the message in the conversation, from 0
	Role   string    // engine role: system, user, assistant, tool
	Text   string    // the message content, verbatim
	Handle string    // stable short name, see MakeHandle
	Time   time.Time // when the store first saw the turn; zero for unstored turns
	// Part, on a hit, names the passage of a long turn that Text then
	// holds ("passage 3 of 9"); empty when Text is the whole turn.
	Part string
	// Parent is the chain of the messages before this one (Link over
	// positions 0..Pos-1; 0 at position 0). The store files a turn under
	// Link(Parent, Role, Text), so a turn reaches only requests whose
	// history up to and including it is the same (see Query.Chain).
	Parent uint64
}

// Link returns the chain of a history through one more message: a hash of
// prev (the chain of the messages before it) and the message's role and
// content. The chain of the empty history is 0.
func Link(prev uint64, role, text string) uint64 {
	h := xxhash.New()
	var b [8]byte
	for i := range b {
		b[i] = byte(prev >> (8 * i))
	}
	_, _ = h.Write(b[:])
	_, _ = h.WriteString(role)
	_, _ = h.WriteString("\x00")
	_, _ = h.WriteString(text)
	return h.Sum64()
}

// Chain returns the chain of t: Link(t.Parent, t.Role, t.Text).
func (t Turn) Chain() uint64 { return Link(t.Parent, t.Role, t.Text) }

// Linked returns turns with Parent set as one contiguous history that
// continues from prev (the chain before turns[0]); it returns the chain
// after the last turn too.
func Linked(prev uint64, turns []Turn) ([]Turn, uint64) {
	out := make([]Turn, len(turns))
	for i, t := range turns {
		t.Parent = prev
		prev = t.Chain()
		out[i] = t
	}
	return out, prev
}

// Key is the (tenant, conversation) a memory belongs to: the one identity
// type of kvwin (ident.Owner).
type Key = ident.Owner

// MakeHandle returns the stable handle of a turn: its position and a short
// hash of its role and text, e.g. "m1234.9f3a". The same turn resent by a
// client gets the same handle on every replica; an edited turn at the same
// position gets a different one, so a handle never names two texts.
func MakeHandle(pos int, role, text string) string {
	h := xxhash.New()
	_, _ = h.WriteString(role)
	_, _ = h.WriteString("\x00")
	_, _ = h.WriteString(text)
	return fmt.Sprintf("m%d.%04x", pos, h.Sum64()&0xffff)
}

// withHandle fills a missing handle.
func withHandle(t Turn) Turn {
	if t.Handle == "" {
		t.Handle = MakeHandle(t.Pos, t.Role, t.Text)
	}
	return t
}
