package llamaserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"kvwin/engine"
	"kvwin/engine/remote"
)

// StatusError is an error answer of the server: the HTTP status it sent and
// the error object of its body. It unwraps to the engine sentinel a caller
// acts on, so a router can tell "try another backend" from "the request is
// bad" without knowing HTTP:
//
//	400, 413, 422          engine.ErrInvalidRequest (the request would fail anywhere)
//	429                    engine.ErrQueueFull      (a kvwin node whose queue is full)
//	anything else          engine.ErrUnavailable    (5xx, loading, auth, no such route)
type StatusError struct {
	Op      string // the call, e.g. "POST http://gpu-1:8080/completion"
	Status  int    // the HTTP status
	Type    string // llama-server's error type ("invalid_request_error", …), if it sent one
	Message string // the server's message, or the start of a body that was not JSON
}

func (e *StatusError) Error() string {
	return remote.StatusText("llamaserver", e.Op, e.Status, e.Type, e.Message)
}

var _ engine.ClientMessager = (*StatusError)(nil)

// ClientMessage is what a gateway may tell its client of the answer: its
// status and error type, not the call (which names an internal URL) nor
// the server's message (its own text, for the gateway's log).
func (e *StatusError) ClientMessage() string {
	return remote.ClientMessage(e.Status, e.Type)
}

// Unwrap returns the engine sentinel of the status (see StatusError).
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return engine.ErrInvalidRequest
	case http.StatusTooManyRequests:
		return engine.ErrQueueFull
	default:
		return engine.ErrUnavailable
	}
}

// errorObject is the error object of llama-server,
//
//	{"error": {"code": 400, "message": "…", "type": "exceed_context_size_error", "n_prompt_tokens": 9412, "n_ctx": 8192}}
//
// and of kvwin's OpenAI routes, whose code is a string; Code stays raw so
// both decode.
type errorObject struct {
	Code          json.RawMessage `json:"code"`
	Message       string          `json:"message"`
	Type          string          `json:"type"`
	NPromptTokens int             `json:"n_prompt_tokens"`
	NCtx          int             `json:"n_ctx"`
}

// decodeError turns an error answer (status and body) into an error (see
// errorFromObject); a body that is not an error object becomes the message.
func decodeError(op string, status int, body []byte, prompt, limit int) error {
	var env struct {
		Error *errorObject `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil {
		return errorFromObject(op, status, env.Error, prompt, limit)
	}
	return &StatusError{Op: op, Status: status, Message: remote.Snippet(body)}
}

// errorFromObject turns a server's error object into an error: a
// *engine.ContextLengthError for a prompt the server says does not fit (so
// the web layer answers context_length_exceeded, as for the embedded
// engine), a *StatusError otherwise. prompt and limit are the prompt's
// length and the slot's context as kvwin knows them, used where the server
// does not say them.
func errorFromObject(op string, status int, obj *errorObject, prompt, limit int) error {
	if status == http.StatusBadRequest && isContextLength(obj) {
		e := &engine.ContextLengthError{PromptTokens: obj.NPromptTokens, Limit: obj.NCtx}
		if e.PromptTokens == 0 {
			e.PromptTokens = prompt
		}
		if e.Limit == 0 {
			e.Limit = limit
		}
		return e
	}
	return &StatusError{Op: op, Status: status, Type: obj.Type, Message: obj.Message}
}

// status is the HTTP status an in-stream error object names in its code
// (llama-server sends the status it would have answered), 500 if none.
func (obj *errorObject) status() int {
	if n, err := strconv.Atoi(string(obj.Code)); err == nil && n >= 400 && n <= 599 {
		return n
	}
	return http.StatusInternalServerError
}

// isContextLength recognises a context-length error in the forms servers
// send it: llama-server's type (newer) or message (older), or the code of a
// kvwin node's OpenAI-shaped error.
func isContextLength(obj *errorObject) bool {
	return obj.Type == "exceed_context_size_error" ||
		strings.Contains(obj.Message, "exceeds the available context size") ||
		string(obj.Code) == `"context_length_exceeded"`
}
