package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// Anthropic's error types, one per status as its API sends them.
const (
	errInvalidRequest = "invalid_request_error"
	errAuthentication = "authentication_error"
	errPermission     = "permission_error"
	errNotFound       = "not_found_error"
	errTooLarge       = "request_too_large"
	errRateLimit      = "rate_limit_error"
	errTimeout        = "timeout_error"
	errAPI            = "api_error"
	errOverloaded     = "overloaded_error"
)

// StatusOverloaded is Anthropic's 529: the service is busy (kvwin: every
// slot busy and the queue full); clients retry it after Retry-After.
const StatusOverloaded = 529

// errorBody is Anthropic's error envelope; request_id is the request's
// X-Request-Id, as Anthropic names its own.
type errorBody struct {
	Type      string   `json:"type"`
	Error     apiError `json:"error"`
	RequestID string   `json:"request_id,omitempty"`
}

type apiError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Shape is the status and Anthropic error body of err: core.Classify
// decides the status, as on every route; a full queue (OpenAI's 429
// queue_full) is Anthropic's 529 overloaded_error.
func Shape(err error) (int, errorBody) {
	status, e := core.Classify(err)
	if e.Code == core.CodeQueueFull {
		return StatusOverloaded, errorBody{Type: eventError, Error: apiError{Type: errOverloaded, Message: e.Message}}
	}
	var ctxLen *engine.ContextLengthError
	if errors.As(err, &ctxLen) {
		// Anthropic's own words, which clients read to compact their
		// history (Claude Code does): the prompt's tokens and the most
		// it may take.
		e.Message = fmt.Sprintf("prompt is too long: %d tokens > %d maximum", ctxLen.PromptTokens, ctxLen.Limit)
	}
	return status, errorBody{Type: eventError, Error: apiError{Type: errorType(status), Message: e.Message}}
}

// errorType is the Anthropic error type of a status.
func errorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return errAuthentication
	case http.StatusForbidden:
		return errPermission
	case http.StatusNotFound:
		return errNotFound
	case http.StatusRequestEntityTooLarge:
		return errTooLarge
	case http.StatusTooManyRequests:
		return errRateLimit
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return errTimeout
	case StatusOverloaded:
		return errOverloaded
	}
	if status >= 500 {
		return errAPI
	}
	return errInvalidRequest
}

// Fail answers err in Anthropic's shape with its status (and Retry-After
// where the status asks for one), unless the client has gone.
func Fail(c *gin.Context, err error) {
	core.AnswerError(c, err, func(err error) (int, any) {
		status, body := Shape(err)
		body.RequestID = c.Writer.Header().Get(wire.HeaderRequestID)
		if status == StatusOverloaded {
			c.Header("Retry-After", strconv.Itoa(core.RetryAfterBusy))
		}
		return status, body
	})
}

// Speaks reports whether a request speaks the Messages API, so errors
// answered before its handler (keys, limits, unknown paths) take its
// shape: a path under /v1/messages, or any request with anthropic-version.
func Speaks(r *http.Request) bool {
	p := r.URL.Path
	return p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/") || r.Header.Get(headerVersion) != ""
}

// headerVersion is the header Anthropic's clients send with every
// request; it is accepted whatever its value.
const headerVersion = "anthropic-version"
