package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// Decode reads and decodes the request body into v (see decodeBody), at
// most limit bytes, within timeout. The read deadline is lifted as soon as the body is
// read: net/http applies a connection's read deadline to the whole request,
// so a server-wide ReadTimeout would cancel a long stream when it passed.
func Decode(c *gin.Context, v any, limit int64, timeout time.Duration) error {
	rc := http.NewResponseController(c.Writer)
	deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	err := decodeBody(c.Writer, c.Request, limit, v)
	if errors.Is(err, ErrBodyTimeout) {
		// Leave the deadline passed and close the connection: net/http
		// would otherwise wait for the rest of the body to keep it alive.
		c.Header("Connection", "close")
		return err
	}
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return err
}

// decodeBody reads the request body, at most limit bytes, checks its
// encoding and decodes it into v. Unknown fields are ignored: OpenAI clients
// send many fields kvwin has no use for, and rejecting them would break them.
//
// The encoding is checked on the raw bytes because encoding/json silently
// replaces invalid UTF-8 and lone surrogate escapes with U+FFFD: the prompt
// the backend sees would differ from what the client sent, and so would
// every cache key computed from it.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	// Give MaxBytesReader the net/http writer under gin's: only that one
	// learns that the body was cut, and then closes the connection instead
	// of draining the rest of an oversized upload.
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		w = u.Unwrap()
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err != nil {
		var (
			tooBig  *http.MaxBytesError
			timeout net.Error
		)
		if errors.As(err, &tooBig) {
			return fmt.Errorf("read body: %w", err)
		}
		if errors.As(err, &timeout) && timeout.Timeout() {
			return ErrBodyTimeout
		}
		return BadInput(CodeInvalidBody, "", "could not read the request body: %v", err)
	}
	if !utf8.Valid(body) {
		return BadInput(CodeInvalidEncoding, "", "request body is not valid UTF-8")
	}
	if at := loneSurrogate(body); at >= 0 {
		return BadInput(CodeInvalidEncoding, "", "request body has an unpaired UTF-16 surrogate escape at byte %d", at)
	}
	if f, ok := v.(FastDecoder); ok && f.DecodeFast(body) {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}

// FastDecoder is a request type with a decoder of its own for the shape
// most of its bodies have, which must give what encoding/json gives.
// DecodeFast gets a body of valid UTF-8 without lone surrogate escapes and
// reports false, leaving the value as it was, for anything it does not
// take; encoding/json then decodes the body, and names its errors.
type FastDecoder interface {
	DecodeFast(body []byte) bool
}

// presized is the most readBody allocates before the bytes arrive.
const presized = 64 << 10

// readBody is io.ReadAll into a buffer sized by the declared length, so a
// long conversation's body is read without growing the buffer a dozen
// times. A client may state any length and send nothing: the start is
// capped (presized), so a connection that holds a body back costs at most
// that much memory before its bytes arrive; past it the buffer doubles
// toward the declared length as bytes arrive (never more than twice what
// came), and a body longer than declared grows as ReadAll's does.
func readBody(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, min(declared+1, presized)) // +1: the read that sees the end
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		switch {
		case len(b) < cap(b):
		case int64(len(b)) <= declared:
			b = append(make([]byte, 0, min(declared+1, 2*int64(cap(b)))), b...)
		default:
			b = append(b, 0)[:len(b)] // more than declared: grow as ReadAll does
		}
	}
}

// jsonError turns an encoding/json error into an inputError naming the
// field where it can.
func jsonError(err error) error {
	var (
		in     *InputError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &in):
		return in // from one of our UnmarshalJSON methods, already precise
	case errors.As(err, &syntax):
		return BadInput(CodeInvalidJSON, "", "request body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.As(err, &typ) && typ.Field == "":
		return BadInput(CodeInvalidType, "", "request body must be a JSON object, not %s", typ.Value)
	case errors.As(err, &typ):
		// Since Go 1.24 the path names embedded structs too ("Params.top_k");
		// clients know only the JSON names.
		field := strings.TrimPrefix(typ.Field, "Params.")
		return BadInput(CodeInvalidType, field, "field %q must be %s, not %s", field, jsonKind(typ.Type), typ.Value)
	default:
		return BadInput(CodeInvalidJSON, "", "request body is not valid JSON: %v", err)
	}
}

// jsonKind names what a Go type decodes from in JSON's words, so error
// messages never show Go type names ("*int", "web.stopList").
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return "a JSON value"
	}
}

// loneSurrogate returns the offset of the first \uXXXX escape in a JSON text
// that encodes a UTF-16 surrogate outside a high-low pair, or -1 if there is
// none.
//
// It can scan the whole text without tracking strings because in valid JSON
// a backslash occurs only inside strings, where it always starts an escape;
// invalid JSON is rejected by the decoder afterwards anyway.
func loneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		r, ok := unicodeEscape(b[i:])
		switch {
		case !ok:
			i++ // a two-byte escape such as \\ or \": skip the escaped byte
		case r >= 0xD800 && r < 0xDC00: // high surrogate: a low one must follow
			lo, ok := unicodeEscape(b[i+6:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return i
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF: // low surrogate without a high one
			return i
		default:
			i += 5
		}
	}
	return -1
}

// unicodeEscape decodes a \uXXXX escape at the start of b.
func unicodeEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
