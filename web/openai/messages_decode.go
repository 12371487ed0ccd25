package openai

import "encoding/json"

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

// fastMessages reads b, a valid JSON value (encoding/json has checked the
// whole body before it calls UnmarshalJSON), as an array of objects whose
// keys are "role" (a string without escapes) and "content" (any string,
// null, array or object, kept raw as encoding/json keeps a RawMessage).
// ok is false for anything else. Content aliases b, the request body,
// which lives as long as the request.
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
					role, next, ok := plainAt(b, i)
					if !ok {
						return nil, false
					}
					m.Role, i = role, next
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
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return string(b[i+1 : j]), j + 1, true
		case '\\':
			return "", 0, false
		}
	}
	return "", 0, false
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
	}
	return 0, false
}

// stringEnd is the offset after the string that starts at b[i].
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, true
		case '\\':
			j++ // the escaped byte; \u's digits are not quotes
		}
	}
	return 0, false
}
