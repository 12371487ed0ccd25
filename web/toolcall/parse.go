package toolcall

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Parser reads a model's answer for tool calls as it streams: text
// before any call is content; a call is recognised once its header (the
// opening marker and the name) is complete, then its arguments stream as
// they come, delimited by counting JSON brackets. Text that cannot start
// a call is content at once; text that might is held until it is clear.
type Parser struct {
	buf     string // text not yet classified
	inArgs  bool   // inside a call's arguments object
	depth   int    // bracket depth within the arguments
	inStr   bool   // inside a JSON string within the arguments
	escaped bool
	Calls   []Call // every call so far, arguments complete or not
	NewID   func() string
	// single: parallel_tool_calls was false; whatever follows the first
	// call is dropped.
	Single bool
}

// callHeader matches a call's start up to its arguments' first byte.
var callHeader = regexp.MustCompile(`^\s*<tool_call>\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*`)

// Parsed is what one feed yields: content, and deltas of calls.
type Parsed struct {
	Content string
	Deltas  []CallDelta
}

// Feed takes the next text of the answer.
func (p *Parser) Feed(s string) Parsed {
	p.buf += s
	var out Parsed
	for p.buf != "" {
		if p.inArgs && p.depth == 0 {
			// Whitespace before the arguments' first bracket is not theirs.
			p.buf = strings.TrimLeft(p.buf, " \t\r\n")
			if p.buf == "" {
				return out
			}
		}
		if p.inArgs {
			n, done := p.scanArgs(p.buf)
			frag := p.buf[:n]
			p.buf = p.buf[n:]
			i := len(p.Calls) - 1
			p.Calls[i].Function.Arguments += frag
			if frag != "" {
				out.Deltas = append(out.Deltas, CallDelta{Index: i, Function: &CallFunction{Arguments: frag}})
			}
			if !done {
				return out
			}
			p.inArgs = false
			continue
		}
		if p.Single && len(p.Calls) == 1 {
			p.buf = ""
			return out
		}
		// Between calls: the rest of a call's wrapper is dropped.
		trimmed := strings.TrimLeft(p.buf, " \t\r\n")
		if rest, ok := strings.CutPrefix(trimmed, "}"); ok && len(p.Calls) > 0 {
			p.buf = rest
			continue
		}
		if rest, ok := strings.CutPrefix(trimmed, "</tool_call>"); ok && len(p.Calls) > 0 {
			p.buf = rest
			continue
		}
		if m := callHeader.FindStringSubmatch(p.buf); m != nil {
			var name string
			_ = json.Unmarshal([]byte(m[1]), &name)
			p.Calls = append(p.Calls, Call{ID: p.NewID(), Type: "function", Function: CallFunction{Name: name}})
			i := len(p.Calls) - 1
			out.Deltas = append(out.Deltas, CallDelta{Index: i, ID: p.Calls[i].ID, Type: "function",
				Function: &CallFunction{Name: name, Arguments: ""}})
			p.buf = p.buf[len(m[0]):]
			p.inArgs, p.depth = true, 0
			continue
		}
		if p.mayStartCall(trimmed) {
			return out // wait for more text
		}
		if len(p.Calls) > 0 && (strings.HasPrefix("</tool_call>", trimmed) || trimmed == "") {
			return out
		}
		// Content, up to where a call may start: a call after text in
		// the same piece (a whole answer is one piece) is still a call.
		cut := callStart(p.buf)
		out.Content += p.buf[:cut]
		p.buf = p.buf[cut:]
	}
	return out
}

// callStart is where in s, after its first byte, a call's opening marker
// begins or may begin (s ends with a prefix of it, or with whitespace a
// marker may follow), with the whitespace before it, which a call's header
// takes; len(s) if nowhere. So text before a call is the same content
// whether the answer comes whole or in pieces.
func callStart(s string) int {
	const open = "<tool_call>"
	i := 1
	for ; i < len(s); i++ {
		if s[i] == '<' && strings.HasPrefix(open, s[i:min(len(s), i+len(open))]) {
			break
		}
	}
	for i > 1 && strings.IndexByte(" \t\r\n", s[i-1]) >= 0 {
		i--
	}
	return i
}

// mayStartCall reports whether s could still become a call's header.
func (p *Parser) mayStartCall(s string) bool {
	const open = "<tool_call>"
	if len(s) < len(open) {
		return strings.HasPrefix(open, s)
	}
	if !strings.HasPrefix(s, open) {
		return false
	}
	// The header is not complete yet; give up on it once it is long
	// enough that it should have been (a name of up to 256 bytes).
	_, after, found := strings.Cut(s[len(open):], `"arguments"`)
	if found {
		return strings.TrimSpace(after) == "" // the colon is still to come
	}
	return len(s) < len(open)+300
}

// scanArgs returns how many bytes of s belong to the arguments object,
// and whether it closed within them.
func (p *Parser) scanArgs(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case p.inStr && p.escaped:
			p.escaped = false
		case p.inStr && c == '\\':
			p.escaped = true
		case p.inStr && c == '"':
			p.inStr = false
		case p.inStr:
		case c == '"':
			p.inStr = true
		case c == '{' || c == '[':
			p.depth++
		case c == '}' || c == ']':
			p.depth--
			if p.depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(s), false
}

// Flush ends the answer: held text that never became a call is content.
func (p *Parser) Flush() Parsed {
	var out Parsed
	if !p.inArgs && len(p.Calls) == 0 {
		out.Content, p.buf = p.buf, ""
	}
	return out
}

// InArgs reports whether the last call's arguments are still coming.
func (p *Parser) InArgs() bool { return p.inArgs }
