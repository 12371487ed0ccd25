package memory

import (
	"hash/fnv"
	"strings"
	"testing"
)

// normalKey hashes the text's terms joined by spaces, as building that text
// and hashing it would: what dedups a packet's hits against each other and
// the window.
func TestNormalKeyIsTheHashOfTheTerms(t *testing.T) {
	for _, s := range []string{"", " ", "Hello, World!", "hello world", "HELLO   world?!", "Zoë moved to Łódź in 2024.",
		"ΣΊΣΥΦΟΣ", "a\xffb", "\xff", "x—y", "emoji 🙂 here", "İstanbul", "  lead and trail  "} {
		h := fnv.New64a()
		h.Write([]byte(strings.Join(terms(s), " ")))
		if got, want := normalKey(s), h.Sum64(); got != want {
			t.Errorf("%q: %x, want %x", s, got, want)
		}
	}
	if normalKey("Hello, world") != normalKey("hello world!") || normalKey("ab") == normalKey("a b") {
		t.Error("normal texts not compared by their terms")
	}
}
