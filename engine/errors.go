package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors backends return. The web layer maps them to HTTP statuses;
// backends never decide statuses themselves.
var (
	// ErrInvalidRequest: the request is malformed (wrapped with the reason).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrQueueFull: every slot is busy and the wait queue is full.
	ErrQueueFull = errors.New("all slots are busy and the queue is full")
	// ErrUnknownModel: the request names a model this backend does not serve.
	ErrUnknownModel = errors.New("unknown model")
	// ErrClosed: the backend is shutting down or closed.
	ErrClosed = errors.New("backend closed")
	// ErrUnavailable: the backend cannot serve now (unhealthy, unreachable).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrNotSupported: the backend lacks the optional ability asked of it
	// (a router none of whose backends has it).
	ErrNotSupported = errors.New("not supported by this server's backend")
	// ErrTimeout: the backend did not connect or did not send its first
	// token in time (nothing was generated; another backend may serve).
	// It is not ErrUnavailable: the client is told the backend timed out.
	ErrTimeout = errors.New("backend timed out")
	// ErrNoLogprobs: the request asks for log-probabilities
	// (Request.Logprobs) and the backend cannot report them (Ollama). It
	// is the client's to fix, not the backend's failure: a router tries a
	// backend that can, and answers it only when none can.
	ErrNoLogprobs = errors.New("logprobs: this backend cannot report log-probabilities")
)

// ContextLengthError says a prompt does not fit the context of one slot,
// or (Window) the budget of the window policy cutting it.
type ContextLengthError struct {
	PromptTokens int // tokens the prompt needs
	Limit        int // tokens one slot holds, or the window's budget
	// Window: Limit is the window budget (kvwin serve --window-budget),
	// which the client is told, not the slot's context.
	Window bool
	// Reason, when set, says what does not fit in more words than the two
	// numbers (the window's newest message); Error returns it.
	Reason string
}

func (e *ContextLengthError) Error() string {
	if e.Reason != "" {
		return e.Reason
	}
	if e.Window {
		return fmt.Sprintf("the window budget is %d tokens, but the prompt needs %d tokens", e.Limit, e.PromptTokens)
	}
	return fmt.Sprintf("this model's context per slot is %d tokens, but the prompt has %d tokens", e.Limit, e.PromptTokens)
}

// Invalid returns an ErrInvalidRequest wrapping a formatted reason.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// Public wraps err with msg, what a server may tell its client of it. A
// remote backend's error names its internal address and quotes what the
// backend said, which belong in the server's log (the web layer logs err
// whole, with the request id) but not in the answer, which gets msg.
// The result unwraps to err, so its sentinels still decide the status.
func Public(err error, msg string) error {
	if err == nil {
		return nil
	}
	return &publicError{err: err, msg: msg}
}

// ClientMessager is implemented by errors that already say what a
// server may tell its client of them (Public's, a remote backend's status
// error), where the error's own text is for the log: errors.As finds one
// in a chain.
type ClientMessager interface {
	ClientMessage() string
}

var _ ClientMessager = (*publicError)(nil)

type publicError struct {
	err error
	msg string
}

func (e *publicError) Error() string { return e.err.Error() }
func (e *publicError) Unwrap() error { return e.err }

// ClientMessage is what the client is told.
func (e *publicError) ClientMessage() string { return e.msg }
