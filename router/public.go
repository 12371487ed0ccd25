package router

import (
	"context"
	"errors"

	"kvwin/engine"
)

// What a gateway's client is told of a failure. The errors of remote
// backends name their internal addresses and quote what the backends said
// (an HTML page of a proxy, a llama.cpp message): the web layer logs
// them whole, with the request id, and the client gets a sentence per
// kind of failure (engine.Public) that says where the details are.

// seeLog ends every such sentence.
const seeLog = " (the gateway's log has the details under this request's X-Request-Id)"

// public wraps err, as the router returns it to the web layer, with the
// sentence its client gets. Errors in kvwin's own words (an invalid
// request the adapter refused, a prompt too long, the caller's context)
// and errors that already carry a client message are left as they are.
func public(err error) error {
	var cm engine.ClientMessager // engine.Public, a backend's StatusError
	var tooLong *engine.ContextLengthError
	switch {
	case err == nil, errors.As(err, &cm), errors.As(err, &tooLong),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, engine.ErrInvalidRequest):
		return err // engine.Invalid: the adapter's own check of the request
	case errors.Is(err, engine.ErrNoLogprobs):
		return engine.Public(err, "no backend of this gateway can report log-probabilities; ask without logprobs")
	case errors.Is(err, engine.ErrUnknownModel):
		return engine.Public(err, "the model is not served by this gateway's backends"+seeLog)
	case errors.Is(err, engine.ErrNotSupported):
		return engine.Public(err, "no backend of this gateway can do this")
	case errors.Is(err, engine.ErrQueueFull):
		return engine.Public(err, "every backend is busy; try again shortly"+seeLog)
	case errors.Is(err, engine.ErrClosed):
		return engine.Public(err, "the gateway is shutting down")
	case errors.Is(err, engine.ErrTimeout):
		return engine.Public(err, "no backend sent a first token in time"+seeLog)
	case errors.Is(err, engine.ErrUnavailable):
		return engine.Public(err, "no backend could serve the request"+seeLog)
	default:
		return engine.Public(err, "the backend failed while answering; the answer is cut short"+seeLog)
	}
}
