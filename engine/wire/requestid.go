package wire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// HeaderRequestID is the HTTP header that carries a request id, both ways.
const HeaderRequestID = "X-Request-Id"

// RequestIDMaxLength bounds an id accepted from a caller: a UUID is 36 characters,
// ours are 24; anything much longer is not an id worth logging.
const RequestIDMaxLength = 64

// NewRequestID returns a fresh id: 12 random bytes in hex (24 characters). It does
// not block beyond reading the system's random source.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error since Go 1.24
	return hex.EncodeToString(b[:])
}

// ValidRequestID reports whether id is well-formed: 1 to RequestIDMaxLength letters, digits,
// '-', '_', '.' or ':'. Anything else (spaces, quotes, control characters,
// new lines) could forge or break a log line, so it is never reused.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > RequestIDMaxLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

type ctxKey struct{}

// WithRequestID returns ctx carrying id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestIDFrom returns the id ctx carries, or "" if none.
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// SetRequestID writes the id ctx carries into h, if it carries one: a backend
// client calls it on each request it sends for a turn.
func SetRequestID(ctx context.Context, h http.Header) {
	if id := RequestIDFrom(ctx); id != "" {
		h.Set(HeaderRequestID, id)
	}
}
