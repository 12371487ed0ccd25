package core

import (
	"errors"
	"fmt"
	"net/http"

	"kvwin/engine"
)

// Error types, as OpenAI names them. Clients branch on the HTTP status and
// on these, so each status has exactly one type.
const (
	TypeInvalidRequest = "invalid_request_error" // 400, 401, 404, 405, 413, 415
	TypePermission     = "permission_error"      // 403
	TypeRateLimit      = "rate_limit_error"      // 429
	TypeServer         = "server_error"          // 500, 503, 504
)

// Error codes. OpenAI leaves code null for many errors; kvwin always fills
// it so a client can tell one 400 from another without parsing messages.
const (
	CodeInvalidJSON          = "invalid_json"               // body is not valid JSON
	CodeInvalidType          = "invalid_type"               // a field has the wrong JSON type
	CodeInvalidEncoding      = "invalid_encoding"           // invalid UTF-8 or a lone UTF-16 surrogate escape
	CodeInvalidBody          = "invalid_body"               // the body could not be read
	CodeMissingParameter     = "missing_required_parameter" // messages or prompt absent or empty
	CodeInvalidValue         = "invalid_value"              // a field is out of range or unsupported
	CodeUnknownParameter     = "unknown_parameter"          // a field the API does not have (OpenAI's code, Responses)
	CodeInvalidRequest       = "invalid_request"            // the backend rejected the request (engine.ErrInvalidRequest)
	CodeContextLength        = "context_length_exceeded"    // the prompt does not fit a slot
	CodeModelNotFound        = "model_not_found"            // the request names a model not served here
	CodeRequestTooLarge      = "request_too_large"          // body over Config.MaxBodyBytes
	CodeTooManyItems         = "array_above_max_length"     // more messages or input items than --max-items (OpenAI's code)
	CodeUnknownURL           = "unknown_url"                // no such route
	CodeMethodNotAllowed     = "method_not_allowed"         // the route exists for other methods
	CodeQueueFull            = "queue_full"                 // every slot busy and the queue full
	CodeTenantLimit          = "tenant_limit"               // the tenant's running and waiting requests are at their limits
	CodeRateLimit            = "rate_limit_exceeded"        // the key's tokens per minute are spent (OpenAI's code)
	CodeInvalidAPIKey        = "invalid_api_key"            // no key, or not a configured one
	CodeForbidden            = "forbidden"                  // the key may not use this route, or the origin is not allowed
	CodeForbiddenHost        = "forbidden_host"             // the Host header is not this server's (DNS rebinding)
	CodeUnsupportedMedia     = "unsupported_media_type"     // a body that is not application/json
	CodeConversationNotFound = "conversation_not_found"     // DELETE of a conversation the tenant does not have
	CodeResponseNotFound     = "response_not_found"         // a stored response (Responses API) the tenant does not have
	CodeMemoryUnavailable    = "memory_store_unavailable"   // the memory store failed to open or verify: stored turns cannot be reached
	CodeRequestTimeout       = "request_timeout"            // the body did not arrive in time
	CodeBackendUnavailable   = "backend_unavailable"        // the backend cannot serve now
	CodeBackendTimeout       = "backend_timeout"            // no backend connected or sent a first token in time
	CodeShuttingDown         = "shutting_down"              // the backend is closed
	CodeInternal             = "internal_error"             // anything else, panics included
)

// ErrorBody is the OpenAI error envelope.
type ErrorBody struct {
	Error APIError `json:"error"`
}

// APIError is the OpenAI error object. Message, Type and Code are always
// non-empty; Param names the offending field when there is one.
type APIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code"`
}

// InputError is a client mistake the web layer itself detects while
// decoding or translating a request. It always means 400.
type InputError struct {
	code  string
	param string
	msg   string
}

func (e *InputError) Error() string { return e.msg }

// Param names the parameter at fault ("" for the body as a whole).
func (e *InputError) Param() string { return e.param }

// Within is e for a parameter sent nested under prefix (as "options."):
// the parameter and the message are prefixed alike.
func (e *InputError) Within(prefix string) *InputError {
	return &InputError{code: e.code, param: prefix + e.param, msg: prefix + e.msg}
}

// BadInput returns an InputError with a formatted message.
func BadInput(code, param, format string, args ...any) error {
	return &InputError{code: code, param: param, msg: fmt.Sprintf(format, args...)}
}

// Errors the router and the recovery middleware report. They go through
// Classify like every other error, so status decisions stay in one place.
var (
	ErrUnknownRoute     = errors.New("unknown route")
	ErrMethodNotAllowed = errors.New("method not allowed")
	ErrPanic            = errors.New("internal server error")

	ErrUnauthorized         = errors.New("invalid API key")
	ErrForbidden            = errors.New("forbidden")
	ErrForbiddenHost        = errors.New("forbidden host")
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	ErrTenantLimit          = errors.New("too many requests for this tenant")
	ErrConversationNotFound = errors.New("no such conversation")
	ErrResponseNotFound     = errors.New("no such response")
	ErrMemoryUnavailable    = errors.New("the memory store is unavailable")
	ErrBodyTimeout          = errors.New("the request body did not arrive in time")
	// errClientGone is recorded (never written) when the client went away,
	// so the access log can tell a dropped request from a served one.
	ErrClientGone = errors.New("client closed the request")
)

// Classify maps any error to its HTTP status and OpenAI error object. It is
// the only place in kvwin where an error becomes a status.
func Classify(err error) (int, APIError) {
	var (
		in      *InputError
		tooBig  *http.MaxBytesError
		ctxLen  *engine.ContextLengthError
		invalid = func(code string) APIError {
			return APIError{Message: message(err), Type: TypeInvalidRequest, Code: code}
		}
	)
	switch {
	case errors.As(err, &in):
		return http.StatusBadRequest, APIError{Message: in.msg, Type: TypeInvalidRequest, Param: in.param, Code: in.code}
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, APIError{
			Message: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit),
			Type:    TypeInvalidRequest, Code: CodeRequestTooLarge,
		}
	// A context-length error is also an invalid request; test it first so
	// a backend that wraps both still gets the specific code.
	case errors.As(err, &ctxLen):
		return http.StatusBadRequest, APIError{Message: ctxLen.Error(), Type: TypeInvalidRequest, Param: "messages", Code: CodeContextLength}
	case errors.Is(err, engine.ErrNoLogprobs):
		// The backend (every backend of a gateway) cannot report them: the
		// client must ask without, so it is told which parameter to drop.
		return http.StatusBadRequest, APIError{Message: message(err), Type: TypeInvalidRequest, Param: "logprobs", Code: CodeInvalidValue}
	case errors.Is(err, engine.ErrUnknownModel):
		return http.StatusNotFound, APIError{Message: message(err), Type: TypeInvalidRequest, Param: "model", Code: CodeModelNotFound}
	case errors.Is(err, engine.ErrInvalidRequest):
		return http.StatusBadRequest, invalid(CodeInvalidRequest)
	case errors.Is(err, ErrUnknownRoute):
		return http.StatusNotFound, invalid(CodeUnknownURL)
	case errors.Is(err, ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed, invalid(CodeMethodNotAllowed)
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, APIError{Message: message(err), Type: TypeInvalidRequest, Code: CodeInvalidAPIKey}
	case errors.Is(err, ErrForbiddenHost):
		return http.StatusForbidden, APIError{Message: message(err), Type: TypePermission, Code: CodeForbiddenHost}
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, APIError{Message: message(err), Type: TypePermission, Code: CodeForbidden}
	case errors.Is(err, ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, invalid(CodeUnsupportedMedia)
	case errors.Is(err, ErrMemoryUnavailable):
		return http.StatusServiceUnavailable, APIError{Message: err.Error(), Type: TypeServer, Code: CodeMemoryUnavailable}
	case errors.Is(err, ErrConversationNotFound):
		return http.StatusNotFound, invalid(CodeConversationNotFound)
	case errors.Is(err, ErrResponseNotFound):
		return http.StatusNotFound, invalid(CodeResponseNotFound)
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout, invalid(CodeRequestTimeout)
	case errors.As(err, new(*RateLimitError)):
		return http.StatusTooManyRequests, APIError{Message: message(err), Type: TypeRateLimit, Code: CodeRateLimit}
	case errors.Is(err, ErrTenantLimit):
		return http.StatusTooManyRequests, APIError{Message: message(err), Type: TypeRateLimit, Code: CodeTenantLimit}
	case errors.Is(err, engine.ErrNotSupported):
		return http.StatusNotImplemented, APIError{Message: message(err), Type: TypeInvalidRequest, Code: "not_supported"}
	case errors.Is(err, engine.ErrQueueFull):
		return http.StatusTooManyRequests, APIError{Message: message(err), Type: TypeRateLimit, Code: CodeQueueFull}
	case errors.Is(err, engine.ErrClosed):
		return http.StatusServiceUnavailable, APIError{Message: message(err), Type: TypeServer, Code: CodeShuttingDown}
	// Before ErrUnavailable: a router that also tried a dead backend
	// still says the one that took the time timed out.
	case errors.Is(err, engine.ErrTimeout):
		return http.StatusGatewayTimeout, APIError{Message: message(err), Type: TypeServer, Code: CodeBackendTimeout}
	case errors.Is(err, engine.ErrUnavailable):
		return http.StatusServiceUnavailable, APIError{Message: message(err), Type: TypeServer, Code: CodeBackendUnavailable}
	default:
		return http.StatusInternalServerError, APIError{Message: message(err), Type: TypeServer, Code: CodeInternal}
	}
}

// message is what the client is told of err: its client message where it
// has one (a remote backend's error, whose text names the backend's URL
// and quotes the backend: that text goes to the log), else its text.
func message(err error) string {
	var remote engine.ClientMessager
	if errors.As(err, &remote) {
		return remote.ClientMessage()
	}
	return err.Error()
}

// ClientGone reports whether the client has left, so err need not be
// written. A body read that timed out also ends the request's context
// (net/http cancels it on any read error), but that client is still there
// and gets its 408.
func ClientGone(c interface{ Err() error }, err error) bool {
	return c.Err() != nil && !errors.Is(err, ErrBodyTimeout)
}
