package core

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// special finds a string's ending, escaping and control bytes at every
// position of a word, among any other bytes, and passes words of none.
func TestSpecialWord(t *testing.T) {
	plain := func(c byte) bool { return c != '"' && c != '\\' && c >= 0x20 }
	rng := rand.New(rand.NewPCG(1, 2))
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			for trial := 0; trial < 20; trial++ {
				var w [8]byte
				want := !plain(byte(c))
				for k := range w {
					w[k] = byte(rng.IntN(256))
					if k != pos && !plain(w[k]) && trial%2 == 0 {
						w[k] = 'a' + byte(k) // half the words: only c may be special
					}
					if k != pos && !plain(w[k]) {
						want = true
					}
				}
				w[pos] = byte(c)
				if got := special(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("special(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// stringEndBytewise is stringEnd one byte at a time, as it was first
// written (FuzzDecodeFastAsDecoded holds that to encoding/json).
func stringEndBytewise(b []byte, i int) (int, bool) {
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

// stringEnd, eight bytes at a time, ends and fails where the byte-by-byte
// reading does, from every start.
func FuzzStringEndAsBytewise(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a long enough string with \"quotes\" inside it"`, "\"tab\tinside a longer string\"",
		`"\u00e9t\u00E9 and \\ more text, past a word"`, `"unterminated and longer than a word`, `"bad \x escape"`, "\"é, ü and 中文 text, no escapes\""} {
		f.Add([]byte(s + `,"next"`))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range b {
			end, ok := stringEnd(b, i)
			wantEnd, wantOK := stringEndBytewise(b, i)
			if end != wantEnd || ok != wantOK {
				t.Fatalf("stringEnd(%q, %d) = %d, %v; byte by byte %d, %v", b, i, end, ok, wantEnd, wantOK)
			}
		}
	})
}

// ObjectsHint counts the messages a list may hold, and no more than its
// bound for a body of "role" strings that is no list of messages.
func TestObjectsHint(t *testing.T) {
	list := `[{"role":"user","content":"say \"role\" twice: \"role\""},{"content":"x","role":"assistant"}]`
	if got := ObjectsHint([]byte(`{"messages":`+list+`}`), len(`{"messages":`)); got != 3 {
		t.Errorf("hint for two messages: %d, want 3 (one spare)", got)
	}
	// A long body is sampled: 2,001 messages of the same length get room
	// for all, and up to a sixteenth more; a text that holds the key everywhere buys no more than the bound.
	var long strings.Builder
	long.WriteString(`{"messages":[`)
	for i := range 2000 {
		fmt.Fprintf(&long, `{"content":"kv cache slot %04d","role":"user"},`, i)
	}
	long.WriteString(`{"content":"","role":"user"}]}`)
	if got := ObjectsHint([]byte(long.String()), len(`{"messages":`)); got < 2002 || got > 2002*17/16+40 {
		t.Errorf("hint for 2,001 messages: %d, want from 2,002 to a sixteenth more", got)
	}
	hostile := []byte(`{"messages":[` + strings.Repeat(`"role",`, 100000) + `"role"]}`)
	if got := ObjectsHint(hostile, len(`{"messages":`)); got != maxObjectsHint+1 {
		t.Errorf("hint for 100,001 role strings: %d, want the bound %d", got, maxObjectsHint+1)
	}
	if got := ObjectsHint([]byte(list), len(list)+5); got != 1 {
		t.Errorf("hint past the end: %d, want 1", got)
	}
}
