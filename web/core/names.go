package core

import (
	"strings"
	"unicode/utf8"
)

// A name a client gives — a conversation's (prompt_cache_key,
// X-Conversation-Id, the id of DELETE /kvwin/v1/conversations/{id}) or a
// stored response's (previous_response_id, the id of /v1/responses/{id})
// — is a key of the memory store, and every store must keep it or find it
// alike: PostgreSQL's text holds neither a NUL byte nor invalid UTF-8
// (SQLite holds both), so such a name would be stored on one and dropped on
// the other. It is refused before any store sees it, the same everywhere.

// CheckName returns nil when name can be a store's key: at most maxBytes
// bytes of valid UTF-8 without a NUL byte. Otherwise it returns a 400
// (CodeInvalidValue for the length, CodeInvalidEncoding for the bytes)
// naming param; the name itself is not quoted back.
func CheckName(param, name string, maxBytes int) error {
	if len(name) > maxBytes {
		return BadInput(CodeInvalidValue, param, "%s is %d bytes; at most %d are allowed", param, len(name), maxBytes)
	}
	return CheckNameBytes(param, name)
}

// CheckNameBytes is CheckName without the bound on length, for a name
// whose length decides something else (a path's id longer than any id is
// not found).
func CheckNameBytes(param, name string) error {
	switch {
	case !utf8.ValidString(name):
		return BadInput(CodeInvalidEncoding, param, "%s is not valid UTF-8", param)
	case strings.IndexByte(name, 0) >= 0:
		return BadInput(CodeInvalidEncoding, param, "%s holds a NUL byte", param)
	}
	return nil
}

// CutAt is s's longest prefix of at most n bytes that does not cut a
// character: how a name too long to quote whole (an id, a path) is quoted.
func CutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
