package window

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"kvwin/engine"
)

// validate checks every message and counts its tokens. A message larger
// than the budget is a TooLongError under every policy: no cut can send it.
func validate(policy string, msgs []engine.Message, count Counter, budget int) ([]int, error) {
	if len(msgs) == 0 {
		return nil, ErrNoMessages
	}
	tokens := make([]int, len(msgs))
	for i, m := range msgs {
		switch {
		case !engine.ValidRole(m.Role):
			return nil, fmt.Errorf("message %d: role %q: %w", i, m.Role, ErrInvalidMessage)
		case !utf8.ValidString(m.Content):
			return nil, fmt.Errorf("message %d: content is not valid UTF-8: %w", i, ErrInvalidMessage)
		case strings.TrimSpace(m.Content) == "":
			return nil, fmt.Errorf("message %d: content is empty or whitespace only: %w", i, ErrInvalidMessage)
		}
		tokens[i] = count(m)
		if tokens[i] > budget {
			return nil, &TooLongError{Policy: policy, Message: i, Tokens: tokens[i], Budget: budget}
		}
	}
	return tokens, nil
}
