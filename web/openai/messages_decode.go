package openai

import (
	"encoding/json"
	"strings"
)

// messageList is a request's messages, decoded by a fast path for what
// nearly every client sends (objects of a role and a content, nothing
// else) and by encoding/json otherwise. A long conversation's body is
// mostly its messages, and encoding/json's reflective decode of them was
// most of a cached turn's time outside llama.cpp (about 1.5 µs a message).
// The fast path gives exactly what encoding/json gives for what it accepts
// (FuzzMessageListAsDecoded); anything else — another field, an escaped
// role, a key spelled in another case — is decoded by encoding/json,
// errors included.
type messageList []chatMessage

func (l *messageList) UnmarshalJSON(b []byte) error {
	if out, ok := fastMessages(b); ok {
		*l = out
		return nil
	}
	var out []chatMessage
	if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	*l = out
	return nil
}

// fastMessages reads b as an array of objects whose keys are "role" (a
// string without escapes) and "content" (any string, null, array or
// object, kept raw as encoding/json keeps a RawMessage). ok is false for
// anything else, and for anything that is not valid JSON: b need not have
// been checked (DecodeFast). Content aliases b, the request body, which
// lives as long as the request.
func fastMessages(b []byte) (out []chatMessage, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	out = make([]chatMessage, 0, 16)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return out, true
	}
	for {
		if i >= len(b) || b[i] != '{' {
			return nil, false
		}
		var m chatMessage
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			i++
		} else {
			for {
				key, next, ok := plainAt(b, i)
				if !ok {
					return nil, false
				}
				i = skipSpace(b, next)
				if i >= len(b) || b[i] != ':' {
					return nil, false
				}
				i = skipSpace(b, i+1)
				switch key {
				case "role":
					role, next, ok := plainBytesAt(b, i)
					if !ok {
						return nil, false
					}
					m.Role, i = roleString(role), next
				case "content":
					end, ok := valueEnd(b, i)
					if !ok {
						return nil, false
					}
					m.Content, i = json.RawMessage(b[i:end:end]), end
				default:
					return nil, false
				}
				i = skipSpace(b, i)
				if i >= len(b) {
					return nil, false
				}
				if b[i] == '}' {
					i++
					break
				}
				if b[i] != ',' {
					return nil, false
				}
				i = skipSpace(b, i+1)
			}
		}
		out = append(out, m)
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, false
		}
		if b[i] == ']' {
			return out, skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
}

// skipSpace is the offset of the first byte from i on that is not JSON
// whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainAt reads the string at b[i] if it has no escapes: its text and the
// offset after its closing quote.
func plainAt(b []byte, i int) (string, int, bool) {
	s, next, ok := plainBytesAt(b, i)
	return string(s), next, ok
}

// plainBytesAt is plainAt's text as the bytes of b.
func plainBytesAt(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// roleString is a role's text, the known roles without an allocation.
func roleString(b []byte) string {
	switch string(b) {
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "system":
		return "system"
	case "tool":
		return "tool"
	case "developer":
		return "developer"
	}
	return string(b)
}

// valueEnd is the offset after the string, null, array or object at b[i];
// ok is false for numbers and booleans (left to encoding/json). b is valid
// JSON, so brackets balance outside strings.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case 'n':
		if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
			return i + 4, true
		}
		return 0, false
	case '[', '{':
		// Content parts: rare enough to be checked by encoding/json's
		// scanner once their end is found.
		end, ok := nestedEnd(b, i)
		return end, ok && json.Valid(b[i:end])
	}
	return 0, false
}

// nestedEnd is the offset after the array or object at b[i], found by
// balancing brackets outside strings; it does not check what is between.
func nestedEnd(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, ok := stringEnd(b, j)
			if !ok {
				return 0, false
			}
			j = end - 1
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// stringEnd is the offset after the string that starts at b[i]; ok is
// false unless it is a valid JSON string (no control bytes, known escapes;
// its UTF-8 is checked with the whole body).
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if j++; j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return 0, false
				}
				j += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// DecodeFast decodes a chat completion body without encoding/json's
// reflective decode of its messages, which a long conversation's body
// mostly is: the top-level object is scanned for its "messages" value,
// which fastMessages reads (and checks); the body with that value replaced
// by null, a few hundred bytes, is left to encoding/json, which checks and
// decodes the rest. A body of valid JSON with a valid array in a valid
// object is valid JSON, so nothing is accepted that encoding/json would
// refuse. false (r untouched) for anything else: a duplicate or
// differently cased "messages" key (encoding/json takes the last and
// matches case-insensitively), an escaped key, another shape of message.
// FuzzDecodeFastAsDecoded holds it to encoding/json's result.
func (r *chatRequest) DecodeFast(body []byte) bool {
	start, end, ok := topLevelValue(body, "messages")
	if !ok {
		return false
	}
	msgs, ok := fastMessages(body[start:end])
	if !ok {
		return false
	}
	rest := make([]byte, 0, len(body)-(end-start)+4)
	rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
	var out chatRequest
	if json.Unmarshal(rest, &out) != nil || out.Messages != nil {
		return false
	}
	out.Messages = msgs
	*r = out
	return true
}

// topLevelValue finds the value of key in the JSON object b, scanning its
// structure strictly (keys, colons, commas) and skipping the other values
// by their extent only; ok is false unless key is there exactly once and no
// key is escaped or matches key in another case.
func topLevelValue(b []byte, key string) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	found := false
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return 0, 0, false
	}
	for {
		k, next, ok := plainAt(b, i)
		if !ok || k != key && strings.EqualFold(k, key) || k == key && found {
			return 0, 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		vend, ok := extent(b, i)
		if !ok {
			return 0, 0, false
		}
		if k == key {
			start, end, found = i, vend, true
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return 0, 0, false
		}
		if b[i] == '}' {
			return start, end, found && skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// extent is the offset after the JSON value at b[i], by its extent only:
// strings and brackets are matched, a number or literal runs to the next
// delimiter.
func extent(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '[', '{':
		return nestedEnd(b, i)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j, j > i
}
