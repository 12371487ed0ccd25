package ollama

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"kvwin/engine"
	"kvwin/engine/remote"
)

// StatusError is an error answer of the server: the HTTP status it sent and
// the message of its body. It unwraps to the engine sentinel a caller acts
// on, so a router can tell "try another backend" from "the request is bad"
// without knowing HTTP:
//
//	404                    engine.ErrUnknownModel   (the model is not on this server: `ollama pull` it)
//	429                    engine.ErrQueueFull      (a proxy's rate limit)
//	other 4xx              engine.ErrInvalidRequest (the request would fail anywhere)
//	5xx and anything else  engine.ErrUnavailable    (a failed load, a full queue: Ollama says 503)
type StatusError struct {
	Op      string // the call, e.g. "POST http://gpu-1:11434/api/chat"
	Status  int    // the HTTP status
	Message string // Ollama's "error", or the start of a body that was not JSON
}

func (e *StatusError) Error() string {
	return remote.StatusText("ollama", e.Op, e.Status, "", e.Message)
}

var _ engine.ClientMessager = (*StatusError)(nil)

// ClientMessage is what a gateway may tell its client of the answer: its
// status, not the call (which names an internal URL) nor Ollama's message
// (for the gateway's log).
func (e *StatusError) ClientMessage() string {
	return remote.ClientMessage(e.Status, "")
}

// Unwrap returns the engine sentinel of the status (see StatusError).
func (e *StatusError) Unwrap() error {
	switch {
	case e.Status == http.StatusNotFound:
		return engine.ErrUnknownModel
	case e.Status == http.StatusTooManyRequests:
		return engine.ErrQueueFull
	case e.Status >= 400 && e.Status < 500:
		return engine.ErrInvalidRequest
	default:
		return engine.ErrUnavailable
	}
}

// statusError builds the error of a status of 400 or more from the start
// of its body; err is what the api client said, used when the body says
// nothing.
func statusError(op string, status int, body []byte, err error) *StatusError {
	e := &StatusError{Op: op, Status: status}
	var obj struct {
		Error string `json:"error"`
	}
	switch {
	case json.Unmarshal(body, &obj) == nil && obj.Error != "":
		e.Message = obj.Error
	case len(bytes.TrimSpace(body)) > 0:
		e.Message = remote.Snippet(body)
	case err != nil:
		e.Message = err.Error()
	}
	return e
}

// unavailable returns an error wrapping engine.ErrUnavailable.
func unavailable(op, format string, args ...any) error {
	return fmt.Errorf("ollama: %s: %w: %s", op, engine.ErrUnavailable, fmt.Sprintf(format, args...))
}

// errIncomplete is what the api client's silence means: the stream ended,
// without an error, before the response marked done.
var errIncomplete = errors.New("the stream ended without its final response")
