package core

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
)

// A scanner for the one part of a chat body that grows with the
// conversation: its messages. encoding/json's reflective decode of a long
// history was most of a cached turn's time outside llama.cpp (about 1.5 µs
// a message, more through a type with its own UnmarshalJSON). A route's
// FastDecoder finds the top-level messages value and reads its objects
// field by field as it finds its end (ScanObjectsAt, every value checked
// as JSON), and leaves the rest of the body, with the messages replaced by
// null, to encoding/json (DecodeMessages does the three). Whatever the scanner does not take -
// another shape, an escaped key, a repeated or differently cased messages
// key - goes to encoding/json whole, so errors keep its wording.

// TopLevelValue finds the value of key in the JSON object b, scanning its
// structure strictly (keys, colons, commas) and skipping the other values
// by their extent only; ok is false unless key is there exactly once and no
// key is escaped or matches key in another case (encoding/json would take
// the last, and matches keys case-insensitively).
//
// A route's FastDecoder is DecodeMessages with the route's own scan.
func TopLevelValue(b []byte, key string) (start, end int, ok bool) {
	return topLevel(b, key, extent)
}

// topLevel is TopLevelValue with read finding the end of key's value (at
// b[i]) where extent would: a scanner that reads the value as it finds its
// end, so the body's longest value is walked once, not twice.
func topLevel(b []byte, key string, read func(b []byte, i int) (int, bool)) (start, end int, ok bool) {
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
		if !ok || string(k) != key && strings.EqualFold(string(k), key) || string(k) == key && found {
			return 0, 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		var vend int
		if string(k) == key {
			vend, ok = read(b, i)
		} else {
			vend, ok = extent(b, i)
		}
		if !ok {
			return 0, 0, false
		}
		if string(k) == key {
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

// DecodeMessages is a FastDecoder's whole work: it finds body's top-level
// messages value, reads it with scan, and decodes the rest of the body
// into v with encoding/json, the messages replaced by null; then field(v)
// gets what scan read. With the messages valid (scan checks them) the
// body is valid exactly when that rest is. false, v untouched, when any
// step refuses, or when the rest still sets the field.
//
// scan reads the messages value at body[i] and returns the offset after
// it (ScanObjectsAt): it is the value's only walk.
func DecodeMessages[T any, L ~[]E, E any](body []byte, v *T, scan func(b []byte, i int) (L, int, bool), field func(*T) *L) bool {
	var msgs L
	start, end, ok := topLevel(body, "messages", func(b []byte, i int) (end int, ok bool) {
		msgs, end, ok = scan(b, i)
		return end, ok
	})
	if !ok {
		return false
	}
	rest := make([]byte, 0, len(body)-(end-start)+4)
	rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
	var out T
	if json.Unmarshal(rest, &out) != nil || *field(&out) != nil {
		return false
	}
	*field(&out) = msgs
	*v = out
	return true
}

// DecodeRaw is DecodeMessages for a body whose long part is one raw value
// (a node's prompt of token ids): it finds body's top-level key, checks
// its value with valid, and decodes the rest of the body into v with
// encoding/json, the value replaced by null; field(v) then gets a copy of
// the value, as encoding/json would have given it. false, v untouched,
// when any step refuses.
func DecodeRaw[T any](body []byte, v *T, key string, valid func([]byte) bool, field func(*T) *json.RawMessage) bool {
	start, end, ok := TopLevelValue(body, key)
	if !ok || !valid(body[start:end]) {
		return false
	}
	rest := make([]byte, 0, len(body)-(end-start)+4)
	rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
	var out T
	if json.Unmarshal(rest, &out) != nil || string(*field(&out)) != "null" {
		return false
	}
	*field(&out) = slices.Clone(json.RawMessage(body[start:end]))
	*v = out
	return true
}

// ScanObjectsAt reads the array at b[i] as an array of objects, calling
// object before each object's fields and field for each of its keys (a
// string without escapes) with the raw value: a string, null, array or
// object, each checked as JSON (numbers and booleans, which no message
// field the scanners take has, end the scan), and returns the offset after
// the array's closing bracket (b may go on: a body's other fields). ok is
// false when the shape is anything else, b is not valid JSON there, or
// field refuses. Values alias b.
func ScanObjectsAt(b []byte, i int, object func(), field func(key, value []byte) bool) (int, bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '{' {
			return 0, false
		}
		object()
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			i++
		} else {
			for {
				key, next, ok := plainAt(b, i)
				if !ok {
					return 0, false
				}
				i = skipSpace(b, next)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipSpace(b, i+1)
				end, ok := valueEnd(b, i)
				if !ok || !field(key, b[i:end:end]) {
					return 0, false
				}
				i = skipSpace(b, end)
				if i >= len(b) {
					return 0, false
				}
				if b[i] == '}' {
					i++
					break
				}
				if b[i] != ',' {
					return 0, false
				}
				i = skipSpace(b, i+1)
			}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		if b[i] == ']' {
			return i + 1, true
		}
		if b[i] != ',' {
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// PlainString is the text of the JSON string raw if it has no escapes: the
// bytes between its quotes.
func PlainString(raw []byte) ([]byte, bool) {
	s, next, ok := plainAt(raw, 0)
	return s, ok && next == len(raw)
}

// String decodes the JSON string raw (checked), its escapes through
// encoding/json; ok is false if raw is not a string.
func String(raw []byte) (string, bool) {
	if s, ok := PlainString(raw); ok {
		return string(s), true
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// Role is a message role's text, the known roles without an allocation.
func Role(b []byte) string {
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

// ObjectsHint is the room for the objects of the array at b[i] a scanner
// allocates at once: about the times a "role" key could start one there
// (the word between unescaped quotes only starts a key or is a whole
// string value), at most maxObjectsHint. Grown by append from a few, a
// 2,000-message history's list was copied some twenty times (776 KB
// allocated to read 110 KB of body, 198 KB with the hint); the bound keeps
// a body of "role" strings that is no list of messages from buying more
// than 400 KB up front.
//
// A body longer than hintSamples samples is counted in that many samples
// spread over it, scaled to its length: counting every "role" searched
// from every quote of the body (a quote opens and closes each string), 115
// µs of a 2,000-message body's 255 µs decode. A history whose messages
// differ in length from part to part gets a hint off by what the samples
// miss: the list grows by append past a short one, and a long one buys
// room it does not use, within the bound. A sixteenth is added to what
// the samples count, since a sample's edges cut messages.
func ObjectsHint(b []byte, i int) int {
	b = b[min(i, len(b)):]
	if len(b) <= hintSamples*hintSample {
		return min(bytes.Count(b, roleKey), maxObjectsHint) + 1
	}
	n, step := 0, (len(b)-hintSample)/(hintSamples-1)
	for k := range hintSamples {
		at := k * step
		// A sample ends past its last byte by the key's length less one:
		// a key across the edge is counted once, in the sample it starts in.
		n += bytes.Count(b[at:min(at+hintSample+len(roleKey)-1, len(b))], roleKey)
	}
	// A sixteenth more: a list a few short grows by a quarter of it.
	return min(n*len(b)/(hintSamples*hintSample)*17/16, maxObjectsHint) + 1
}

// A long body's ObjectsHint counts hintSamples samples of hintSample bytes:
// 8 KB, tens of messages of a chat, a few of an assistant's answers.
const hintSamples, hintSample = 4, 2048

var roleKey = []byte(`"role"`)

// maxObjectsHint bounds ObjectsHint: a long history's messages (a message
// is about 100 bytes in a scanner's list).
const maxObjectsHint = 4096

// SkipSpace is the offset of the first byte of b from i on that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int { return skipSpace(b, i) }

// skipSpace is the offset of the first byte from i on that is not JSON
// whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainAt reads the string at b[i] if it has no escapes (and no control
// bytes): its text and the offset after its closing quote.
func plainAt(b []byte, i int) ([]byte, int, bool) {
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

// valueEnd is the offset after the string, null, array or object at b[i],
// checked as JSON; ok is false for numbers and booleans. It is extent, with
// the check: strings are checked as they are scanned, content parts (rare)
// by encoding/json's scanner once their end is found.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case 'n':
		if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
			return i + 4, true
		}
		return 0, false
	case '"':
		return extent(b, i)
	case '[', '{':
		end, ok := extent(b, i)
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
		// Past a short string's first eight bytes (a role, a key), eight
		// plain bytes at a time: a history's contents are most of a body,
		// and byte by byte they were most of reading it.
		if j > i+8 {
			for j+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[j:])) {
				j += 8
			}
			if j >= len(b) {
				break
			}
		}
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

// special reports whether any byte of w (eight bytes of a string) ends it,
// escapes or is a control byte: '"', '\\' or below 0x20. Each test is the
// exact "has a zero byte" (or "has a byte below n") word trick, so a word
// it passes has none of them.
func special(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, e := w^(ones*'"'), w^(ones*'\\')
	return ((q-ones)&^q|(e-ones)&^e|(w-ones*0x20)&^w)&highs != 0
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

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
