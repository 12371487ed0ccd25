package window

import (
	"errors"
	"fmt"

	"kvwin/engine"
)

// Errors a window returns. Each wraps engine.ErrInvalidRequest or is an
// engine.ContextLengthError, so the web layer maps them to 400 without
// knowing this package.
var (
	// ErrInvalidMessage: a message is empty or whitespace only, is not
	// valid UTF-8, or has an unknown role (wrapped with which and why).
	ErrInvalidMessage = fmt.Errorf("%w: invalid message", engine.ErrInvalidRequest)
	// ErrNoMessages: the request has no messages.
	ErrNoMessages = fmt.Errorf("%w: no messages", engine.ErrInvalidRequest)
	// ErrUnknownPolicy: the policy name is not one of Policies().
	ErrUnknownPolicy = fmt.Errorf("%w: unknown window policy", engine.ErrInvalidRequest)
	// ErrSettings: window settings out of range (a configuration error).
	ErrSettings = errors.New("invalid window settings")
)

// TooLongError says a message, or the smallest window a policy can make,
// does not fit the budget: OpenAI's context_length_exceeded. It unwraps to
// an *engine.ContextLengthError.
type TooLongError struct {
	Policy  string
	Message int // index of the message that alone exceeds the budget, or -1
	Tokens  int // tokens needed
	Budget  int
}

func (e *TooLongError) Error() string {
	if e.Message >= 0 {
		return fmt.Sprintf("window %s: message %d has %d tokens, more than the window budget of %d", e.Policy, e.Message, e.Tokens, e.Budget)
	}
	return fmt.Sprintf("window %s: the prompt needs %d tokens, more than the window budget of %d", e.Policy, e.Tokens, e.Budget)
}

// Unwrap lets errors.As find an *engine.ContextLengthError.
func (e *TooLongError) Unwrap() error {
	return &engine.ContextLengthError{PromptTokens: e.Tokens, Limit: e.Budget, Window: true}
}
