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
// does not fit: OpenAI's context_length_exceeded. It unwraps to an
// *engine.ContextLengthError.
type TooLongError struct {
	Policy  string
	Message int // index of the message that does not fit, or -1
	// MessageTokens, when set, are the tokens of message Message, the
	// newest: with the system messages and the rest of its unit it needs
	// Tokens (sink and memory).
	MessageTokens int
	Tokens        int // tokens needed
	Budget        int // tokens the window may hold
	// Context: Budget is what the context leaves after the request's
	// max_tokens, not the window budget.
	Context bool
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("window %s: %s", e.Policy, e.reason())
}

// reason says what does not fit, in the words the client is told.
func (e *TooLongError) reason() string {
	limit := fmt.Sprintf("the window budget of %d", e.Budget)
	if e.Context {
		limit = fmt.Sprintf("the %d tokens the context leaves after max_tokens", e.Budget)
	}
	switch {
	case e.MessageTokens > 0:
		return fmt.Sprintf("the newest message (message %d, %d tokens) with the system messages and the rest of its exchange needs %d tokens, more than %s",
			e.Message, e.MessageTokens, e.Tokens, limit)
	case e.Message >= 0:
		return fmt.Sprintf("message %d has %d tokens, more than %s", e.Message, e.Tokens, limit)
	}
	return fmt.Sprintf("the prompt needs %d tokens, more than %s", e.Tokens, limit)
}

// Unwrap lets errors.As find an *engine.ContextLengthError.
func (e *TooLongError) Unwrap() error {
	err := &engine.ContextLengthError{PromptTokens: e.Tokens, Limit: e.Budget, Window: !e.Context}
	if e.MessageTokens > 0 {
		err.Reason = e.reason()
	}
	return err
}
