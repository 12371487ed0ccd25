package ttft

// Roles of the chat messages the harness sends.
const (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
)

// Message is one chat message as the harness sends it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Turn is one exchange: the user's message (the ask of one request) and
// the assistant's reply, which the workload supplies so that the history
// sent at the next turn does not depend on what the model generated.
type Turn struct {
	User      string
	Assistant string
}

// Conversation is a workload: an optional system prompt and its turns.
type Conversation struct {
	System string
	Turns  []Turn
}

// Messages returns what a client sends at turn n (1-based): the system
// prompt, turns 1..n−1 with their replies, and turn n's user message. salt,
// if not empty, is prepended to the system prompt (see Runner.Salt); a
// conversation without a system prompt then gets one holding only salt.
func (c Conversation) Messages(n int, salt string) []Message {
	msgs := make([]Message, 0, 2*n)
	if sys := salt + c.System; sys != "" {
		msgs = append(msgs, Message{Role: roleSystem, Content: sys})
	}
	for i, t := range c.Turns[:n] {
		msgs = append(msgs, Message{Role: roleUser, Content: t.User})
		if i < n-1 {
			msgs = append(msgs, Message{Role: roleAssistant, Content: t.Assistant})
		}
	}
	return msgs
}

// Truncate returns c with at most n turns (all of them if n ≤ 0).
func (c Conversation) Truncate(n int) Conversation {
	if n > 0 && n < len(c.Turns) {
		c.Turns = c.Turns[:n]
	}
	return c
}
