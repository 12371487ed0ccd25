package toolcall

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// What an answer means, as the API a client reads it through reports it:
// its text before its calls, and each call's name and arguments as a JSON
// value. Two texts that mean the same differ only where no API lets a
// client see it: whitespace around the text and between calls, the
// spacing, key order and string escaping of the JSON, a number's
// notation. The server generated one of them; a client sends back the
// other, re-serialised (Anthropic's tool_use input is an object; SDKs
// re-encode it). Answers (answers.go) maps one to the other.
//
// The reading is strict: a text means something only when it is, after
// its leading text, nothing but whole calls
//
//	<tool_call>{"name": NAME, "arguments": {…}}</tool_call>
//
// (whitespace anywhere between the pieces), every string valid UTF-8
// without lone surrogates and no object with a key twice. Anything else
// (a call cut short, text after a call, a call beyond the first that
// parallel_tool_calls false dropped) has no meaning here, so it is never
// taken for another text.

// meaning is the canonical form of what an answer says: its key in
// Answers, with the tenant it was said for.
type meaning [sha256.Size]byte

var errNoMeaning = errors.New("toolcall: the text is not text followed by whole calls")

// meaningOf reads text as content then calls and returns its meaning for
// tenant; errNoMeaning (or a JSON error) if text is not of that form.
func meaningOf(tenant, text string) (meaning, error) {
	said, err := meaningsOf(tenant, text)
	if err != nil {
		return meaning{}, err
	}
	return said[len(said)-1].mean, nil
}

// saying is what text up to end means: its content and its first calls.
type saying struct {
	mean meaning
	end  int
}

// meaningsOf reads text as content then calls, and returns the meaning of
// its content with its first call, with its first two, …, with all of
// them (a client told of its first call only, parallel_tool_calls false,
// sends back the first).
func meaningsOf(tenant, text string) ([]saying, error) {
	i := strings.Index(text, callMarker)
	if i < 0 {
		return nil, errNoMeaning
	}
	h := sha256.New()
	field := func(b []byte) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	field([]byte(tenant))
	field([]byte(strings.TrimSpace(text[:i])))
	rest := text[i:]
	var (
		canon bytes.Buffer
		said  []saying
	)
	for {
		rest = strings.TrimLeft(rest, whitespace)
		if rest == "" && len(said) > 0 {
			break
		}
		name, args, after, err := readCall(rest)
		if err != nil {
			return nil, err
		}
		canon.Reset()
		if err := canonical(&canon, args); err != nil {
			return nil, err
		}
		field([]byte(name))
		field(canon.Bytes())
		rest = after
		var m meaning
		h.Sum(m[:0]) // the hash so far; h goes on
		said = append(said, saying{m, len(text) - len(rest)})
	}
	return said, nil
}

const (
	callMarker = "<tool_call>"
	callEnd    = "</tool_call>"
	whitespace = " \t\r\n"
)

// readCall reads one call at the start of s: its name, its arguments'
// JSON text and what follows the call's closing marker.
func readCall(s string) (name string, args []byte, rest string, err error) {
	body, ok := strings.CutPrefix(s, callMarker)
	if !ok {
		return "", nil, "", errNoMeaning
	}
	d := json.NewDecoder(strings.NewReader(body))
	want := func(expect json.Token) bool {
		tok, err := d.Token()
		return err == nil && tok == expect
	}
	if !want(json.Delim('{')) || !want("name") {
		return "", nil, "", errNoMeaning
	}
	tok, err := d.Token()
	name, isString := tok.(string)
	if err != nil || !isString || !want("arguments") {
		return "", nil, "", errNoMeaning
	}
	var raw json.RawMessage
	if err := d.Decode(&raw); err != nil || len(raw) == 0 || raw[0] != '{' {
		return "", nil, "", errNoMeaning
	}
	if !want(json.Delim('}')) {
		return "", nil, "", errNoMeaning
	}
	// The decoder replaced what was unsound in the name by U+FFFD: a name
	// holding it has no meaning (function names are ASCII in practice).
	if strings.ContainsRune(name, utf8.RuneError) {
		return "", nil, "", errNoMeaning
	}
	after := strings.TrimLeft(body[d.InputOffset():], whitespace)
	rest, ok = strings.CutPrefix(after, callEnd)
	if !ok {
		return "", nil, "", errNoMeaning
	}
	return name, raw, rest, nil
}

// canonical writes JSON value raw in canonical form: objects' keys sorted,
// strings by their value, numbers by their exact decimal value (1.0 is 1,
// 1e2 is 100; 2^53+1 is not 2^53). An object with a key twice and a string
// whose text is not valid UTF-8 or holds a lone surrogate have no
// canonical form: decoders disagree on what they mean.
func canonical(dst *bytes.Buffer, raw []byte) error {
	if !sound(raw) {
		return errNoMeaning
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := canonicalValue(dst, d); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errNoMeaning
	}
	return nil
}

func canonicalValue(dst *bytes.Buffer, d *json.Decoder) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			dst.WriteByte('[')
			for n := 0; d.More(); n++ {
				if n > 0 {
					dst.WriteByte(',')
				}
				if err := canonicalValue(dst, d); err != nil {
					return err
				}
			}
			_, err := d.Token()
			dst.WriteByte(']')
			return err
		}
		return canonicalObject(dst, d)
	case string:
		b, _ := json.Marshal(v)
		dst.Write(b)
	case json.Number:
		n, err := decimal(string(v))
		if err != nil {
			return err
		}
		dst.WriteString(n)
	case bool:
		dst.WriteString(strconv.FormatBool(v))
	case nil:
		dst.WriteString("null")
	}
	return nil
}

// canonicalObject writes the rest of an object whose '{' was read.
func canonicalObject(dst *bytes.Buffer, d *json.Decoder) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var val bytes.Buffer
		if err := canonicalValue(&val, d); err != nil {
			return err
		}
		members = append(members, member{key, val.Bytes()})
	}
	if _, err := d.Token(); err != nil {
		return err
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	dst.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			if m.key == members[i-1].key {
				return errNoMeaning
			}
			dst.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		dst.Write(k)
		dst.WriteByte(':')
		dst.Write(m.val)
	}
	dst.WriteByte('}')
	return nil
}

// decimal is a JSON number's exact value as digits and an exponent:
// "-1.50e1" is "-15e0", "0.0" is "0".
func decimal(lit string) (string, error) {
	sign := ""
	if rest, ok := strings.CutPrefix(lit, "-"); ok {
		sign, lit = "-", rest
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	e := 0
	if hasExp {
		var err error
		if e, err = strconv.Atoi(strings.TrimPrefix(exp, "+")); err != nil || e > 1<<30 || e < -(1<<30) {
			return "", errNoMeaning
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	e -= len(frac)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		e++
	}
	if digits == "" {
		return "0", nil
	}
	return sign + digits + "e" + strconv.Itoa(e), nil
}

// sound reports whether every string in JSON text raw is valid UTF-8
// without a lone surrogate escape, so that its decoded value is exactly
// what it says (a decoder replaces what is unsound with U+FFFD, which
// would make "\ud800" equal "\ufffd").
func sound(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	inStr := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case !inStr:
			inStr = c == '"'
		case c == '"':
			inStr = false
		case c == '\\' && i+1 < len(raw) && raw[i+1] == 'u':
			r, ok := hex4(raw, i+2)
			switch {
			case !ok:
				return false
			case utf16.IsSurrogate(r):
				low, ok := hex4(raw, i+8)
				if r >= 0xdc00 || !ok || i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' || utf16.DecodeRune(r, low) == utf8.RuneError {
					return false
				}
				i += 11
			default:
				i += 5
			}
		case c == '\\':
			i++ // the escaped byte
		}
	}
	return true
}

// hex4 reads four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	return rune(n), err == nil
}
