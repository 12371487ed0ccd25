package memory

import (
	"fmt"
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
}

// Key names a durable conversation. The tenant comes from authentication,
// never from a client-chosen header, so one tenant cannot name another's
// conversation.
type Key struct {
	Tenant       string
	Conversation string
}

func (k Key) String() string { return fmt.Sprintf("%s/%s", k.Tenant, k.Conversation) }

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
