// Package requestid names one HTTP request across kvwin's processes: the id
// a server gives each request (or reuses from a trusted caller), carried in
// the request's context, written on every log line logged with that
// context, returned as X-Request-Id and sent on to backends, so a gateway's
// and a node's lines for one turn share it.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// Header is the HTTP header that carries a request id, both ways.
const Header = "X-Request-Id"

// MaxLength bounds an id accepted from a caller: a UUID is 36 characters,
// ours are 24; anything much longer is not an id worth logging.
const MaxLength = 64

// New returns a fresh id: 12 random bytes in hex (24 characters). It does
// not block beyond reading the system's random source.
func New() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error since Go 1.24
	return hex.EncodeToString(b[:])
}

// Valid reports whether id is well-formed: 1 to MaxLength letters, digits,
// '-', '_', '.' or ':'. Anything else (spaces, quotes, control characters,
// new lines) could forge or break a log line, so it is never reused.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLength {
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

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the id ctx carries, or "" if none.
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Set writes the id ctx carries into h, if it carries one: a backend
// client calls it on each request it sends for a turn.
func Set(ctx context.Context, h http.Header) {
	if id := From(ctx); id != "" {
		h.Set(Header, id)
	}
}
