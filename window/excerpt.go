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
// longer than a message's share of the budget (Settings.MessageShare, at
// most longTurnTokens).
//
// Invariants: the excerpt is a pure function of the message (position,
// role, content), its full token count and the share, so it is the same
// bytes on every turn and on every replica; the newest message and system
// messages are never excerpted.
type Excerpt struct {
	Pos    int // position of the message in the conversation
	Tokens int // its full tokens, by the request's counter
}

// An excerpt is minExcerpt tokens: a message's opening, the marker naming
// its handle, its close. A message is long past longTurnTokens at most
// (Settings.longMessage): the memory's own long turn (two passages of 512
// bytes, memory's passage rule) at four bytes a token, so a turn the memory
// quotes by its passage stands in the window by its excerpt, and a kept
// history holds the short turns around long answers, not the answers.
const (
	minExcerpt     = 64
	longTurnTokens = 256
)

// excerptOf returns the message at pos as its excerpt of excerptRoom
// tokens: its beginning and its end, two to one (a message says what it is
// about first, and an answer concludes last), around a marker that says how
// much is left out and names the message by its handle, under which the
// memory keeps it whole. The cuts fall on whitespace where one is near, so
// no word is split; the share of bytes kept is the share of tokens, as the
// message's own bytes per token (tokens counts it whole).
func excerptOf(m engine.Message, pos, tokens, room int) engine.Message {
	room = excerptRoom(m.Content, pos, tokens, room)
	if tokens <= room || room <= 0 || len(m.Content) == 0 {
		return m
	}
	handle := memory.MakeHandle(pos, m.Role, m.Content)
	bytes := int64(len(m.Content))
	keep := room - markerTokens(len(excerptMarker(tokens, tokens, handle)), bytes, tokens)
	keepBytes := int(bytes * int64(keep) / int64(tokens))
	head := cutBack(m.Content, keepBytes*2/3)
	tail := max(cutForward(m.Content, len(m.Content)-(keepBytes-len(head))), len(head))
	m.Content = strings.TrimRightFunc(head, unicode.IsSpace) + excerptMarker(tokens-keep, tokens, handle) + strings.TrimLeftFunc(m.Content[tail:], unicode.IsSpace)
	return m
}

// excerptRoom is the tokens of the excerpt of a message of tokens tokens
// at pos: room, or twice its marker where the marker would take more than
// half of room (a counter of few bytes a token), so the message's own text
// keeps at least half the excerpt. A pure function of the message's length,
// position and tokens, so the replay counts what the window sends.
func excerptRoom(content string, pos, tokens, room int) int {
	if room <= 0 || len(content) == 0 {
		return room
	}
	handle := fmt.Sprintf("m%d.0000", pos) // MakeHandle's length
	return max(room, 2*markerTokens(len(excerptMarker(tokens, tokens, handle)), int64(len(content)), tokens))
}

// excerptMarker is the marker of an excerpt that leaves out left of a
// message's tokens.
func excerptMarker(left, tokens int, handle string) string {
	return fmt.Sprintf("\n\n[… %d of its %d tokens left out here; the whole message is kept in memory as %s …]\n\n", left, tokens, handle)
}

// markerTokens is what a marker of markerBytes costs in a message's own
// bytes per token (with at most as many digits as the whole count).
func markerTokens(markerBytes int, bytes int64, tokens int) int {
	return int((int64(markerBytes)*int64(tokens) + bytes - 1) / bytes)
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
