package window

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"kvwin/engine"
)

// validate checks every message but the first checked and counts every
// message's tokens: system and user messages must have content; assistant
// and tool messages may be empty. A message larger than the budget is a
// TooLongError under full and sliding, which send messages whole. The
// counts are written into into's memory where it is large enough.
func validate(into []int, policy string, msgs []engine.Message, count Counter, budget, checked int) ([]int, error) {
	if len(msgs) == 0 {
		return nil, ErrNoMessages
	}
	tokens := grow(into, len(msgs))
	for i, m := range msgs {
		switch {
		case i < checked:
			// Equal to a message of a list already found valid (Build).
		case !engine.ValidRole(m.Role):
			return nil, fmt.Errorf("message %d: role %q: %w", i, m.Role, ErrInvalidMessage)
		case !utf8.ValidString(m.Content):
			return nil, fmt.Errorf("message %d: content is not valid UTF-8: %w", i, ErrInvalidMessage)
		case strings.TrimSpace(m.Content) == "" && m.Role != engine.RoleAssistant && m.Role != engine.RoleTool:
			// A model may answer nothing (it stopped at once, or only
			// called a tool), and clients send that answer back with the
			// history; only what a person or the system wrote must say
			// something.
			return nil, fmt.Errorf("message %d: %s content is empty or whitespace only: %w", i, m.Role, ErrInvalidMessage)
		}
		tokens[i] = count(m)
		if tokens[i] > budget && (policy == PolicyFull || policy == PolicySliding) {
			return nil, &TooLongError{Policy: policy, Message: i, Tokens: tokens[i], Budget: budget}
		}
	}
	return tokens, nil
}
