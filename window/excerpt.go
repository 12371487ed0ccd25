package window

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"kvwin/engine"
	"kvwin/window/memory"
)

// Excerpt is a message that stands in the window as its excerpt: it is
// longer than a message's share of the budget (Settings.MessageShare).
//
// Invariants: the excerpt is a pure function of the message (position,
// role, content), its full token count and the share, so it is the same
// bytes on every turn and on every replica; the newest message and system
// messages are never excerpted.
type Excerpt struct {
	Pos    int // position of the message in the conversation
	Tokens int // its full tokens, by the request's counter
}

// minExcerpt is the fewest tokens an excerpt is cut to.
const minExcerpt = 64

// excerptOf returns the message at pos as its excerpt of about room tokens:
// its beginning and its end, two to one (a message says what it is about
// first, and an answer concludes last), around a marker that says how much
// is left out and names the message by its handle, under which the memory
// keeps it whole. The cuts fall on whitespace where one is near, so no
// word is split; the share of bytes kept is the share of tokens, as the
// message's own bytes per token (tokens counts it whole).
func excerptOf(m engine.Message, pos, tokens, room int) engine.Message {
	if tokens <= room || room <= 0 || len(m.Content) == 0 {
		return m
	}
	handle := memory.MakeHandle(pos, m.Role, m.Content)
	marker := func(left int) string {
		return fmt.Sprintf("\n\n[… %d of its %d tokens left out here; the whole message is kept in memory as %s …]\n\n", left, tokens, handle)
	}
	// The marker costs what its bytes cost in this message's own bytes
	// per token (at most as many digits as the whole count).
	bytes := int64(len(m.Content))
	markerTokens := int((int64(len(marker(tokens)))*int64(tokens) + bytes - 1) / bytes)
	keep := max(room-markerTokens, room/2)
	keepBytes := int(bytes * int64(keep) / int64(tokens))
	head := cutBack(m.Content, keepBytes*2/3)
	tail := max(cutForward(m.Content, len(m.Content)-(keepBytes-len(head))), len(head))
	m.Content = strings.TrimRightFunc(head, unicode.IsSpace) + marker(tokens-keep) + strings.TrimLeftFunc(m.Content[tail:], unicode.IsSpace)
	return m
}

// cutBack returns s cut to at most n bytes, at the last whitespace within
// the final 64 bytes of the cut if there is one, else at a rune boundary.
func cutBack(s string, n int) string {
	if n >= len(s) {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	for j := n; j > 0 && j > n-64; j-- {
		if s[j-1] == ' ' || s[j-1] == '\n' || s[j-1] == '\t' {
			return s[:j]
		}
	}
	return s[:n]
}

// cutForward returns the offset at or after i where the tail of s starts:
// the first whitespace within 64 bytes after i if there is one, else the
// next rune boundary.
func cutForward(s string, i int) int {
	if i <= 0 {
		return 0
	}
	if i >= len(s) {
		return len(s)
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	for j := i; j < len(s) && j < i+64; j++ {
		if s[j] == ' ' || s[j] == '\n' || s[j] == '\t' {
			return j
		}
	}
	return i
}
