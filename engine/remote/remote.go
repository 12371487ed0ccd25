// Package remote holds what the adapters of remote servers (llamaserver,
// ollama) do alike: the transport they reach a server with, and what they
// say of its error answers (the text of a status error, what a gateway may
// tell its client of it, the start of a body quoted in an error message).
// A leaf: it imports no kvwin package. See
// docs/architecture.md.
package remote

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// MaxErrorText bounds how much of a body that is not an error object goes
// into an error message: a proxy's HTML page is not worth more.
const MaxErrorText = 300

// Snippet is the start of a body for an error message: trimmed, cut at
// MaxErrorText bytes, invalid UTF-8 (a character cut in two included)
// replaced by U+FFFD.
func Snippet(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) <= MaxErrorText {
		return strings.ToValidUTF8(string(body), "\uFFFD")
	}
	return strings.ToValidUTF8(string(body[:MaxErrorText]), "\uFFFD") + "…"
}

// StatusText is the error text of a server's error answer,
//
//	PREFIX: OP: STATUS STATUS-TEXT (TYPE): MESSAGE
//
// the type and the message left out where empty. prefix names the adapter
// ("llamaserver"), op the call ("POST http://gpu-1:8080/completion").
func StatusText(prefix, op string, status int, typ, message string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: %d %s", prefix, op, status, http.StatusText(status))
	if typ != "" {
		fmt.Fprintf(&b, " (%s)", typ)
	}
	if message != "" {
		b.WriteString(": ")
		b.WriteString(message)
	}
	return b.String()
}

// ClientMessage is what a gateway may tell its client of a server's error
// answer: its status and, where it is a short snake_case word, its error
// type; not the call (which names an internal URL) nor the server's message
// (its own text, for the gateway's log).
func ClientMessage(status int, typ string) string {
	msg := fmt.Sprintf("the backend answered %d %s", status, http.StatusText(status))
	if isIdentifier(typ) {
		msg += " (" + typ + ")"
	}
	return msg + "; the gateway's log has its message under this request's X-Request-Id"
}

// isIdentifier reports whether s is a short snake_case word, as
// llama-server's error types are: safe to repeat to a client.
func isIdentifier(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}
