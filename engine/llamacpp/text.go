package llamacpp

import (
	"strings"
	"unicode/utf8"
)

// textDecoder turns the byte pieces of generated tokens into text that never
// splits a UTF-8 character: bytes of an incomplete character are held until
// the character completes; bytes that can never form a valid character become
// U+FFFD at once. Streaming and non-streaming output use the same decoder, so
// their text is byte-identical.
type textDecoder struct {
	pending []byte
}

// feed adds bytes and returns the text that is complete.
func (d *textDecoder) feed(b string) string {
	d.pending = append(d.pending, b...)
	var out strings.Builder
	for len(d.pending) > 0 {
		if !utf8.FullRune(d.pending) {
			break // an incomplete but so far valid prefix: wait for more bytes
		}
		r, size := utf8.DecodeRune(d.pending)
		if r == utf8.RuneError && size == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(d.pending[:size])
		}
		d.pending = d.pending[size:]
	}
	return out.String()
}

// flush returns held bytes at the end of a generation, each as U+FFFD.
func (d *textDecoder) flush() string {
	n := len(d.pending)
	d.pending = d.pending[:0]
	return strings.Repeat(string(utf8.RuneError), n)
}

// stopMatcher cuts generated text at the first stop string. Text that could
// be the start of a stop string is held back until it is known not to be,
// so a client never sees part of a stop string.
type stopMatcher struct {
	stops   []string
	held    string
	matched string // the stop string found, once one is
}

// push adds text and returns what may be emitted now, and whether a stop
// string was found (then nothing after it is emitted).
func (m *stopMatcher) push(text string) (string, bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	s := m.held + text
	first := -1
	for _, stop := range m.stops {
		if i := strings.Index(s, stop); i >= 0 && (first < 0 || i < first) {
			first, m.matched = i, stop
		}
	}
	if first >= 0 {
		m.held = ""
		return s[:first], true
	}
	hold := 0
	for _, stop := range m.stops {
		for k := min(len(stop)-1, len(s)); k > hold; k-- {
			if strings.HasSuffix(s, stop[:k]) {
				hold = k
				break
			}
		}
	}
	m.held = s[len(s)-hold:]
	return s[:len(s)-hold], false
}

// flush returns held text at the end of a generation.
func (m *stopMatcher) flush() string {
	s := m.held
	m.held = ""
	return s
}
