package window

import (
	"strings"
	"testing"
	"unicode"
)

// isQuestionUnicode is isQuestion as it read every ask before its ASCII
// path: the reference the fast path must equal.
func isQuestionUnicode(ask string) bool {
	if len(ask) > longAsk {
		return false
	}
	if strings.Contains(ask, "?") || strings.Contains(ask, "？") {
		return true
	}
	start := strings.IndexFunc(ask, unicode.IsLetter)
	if start < 0 {
		return false
	}
	word := ask[start:]
	if end := strings.IndexFunc(word, func(r rune) bool { return !unicode.IsLetter(r) }); end >= 0 {
		word = word[:end]
	}
	return interrogatives[strings.ToLower(word)]
}

// isQuestion reads an ASCII ask byte by byte and any other as before:
// the same answer for every ask.
func FuzzIsQuestionAsBefore(f *testing.F) {
	for _, s := range []string{"What did Omar say", "  tell me", "DOES it", "Summarize that.", "summarizer", "how's it going",
		"Éclair recipe", "what\u00e9", "Was\u212A", "WHICH one", "please!", "¿Qué?", "42 is the answer", "", "- list them", "Tellme", "İs it"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ask string) {
		if got, want := isQuestion(ask), isQuestionUnicode(ask); got != want {
			t.Fatalf("isQuestion(%q) = %v, before %v", ask, got, want)
		}
	})
}

// Every interrogative is one, in any case: the stack room isInterrogative
// lowers a word in holds the longest.
func TestEveryInterrogativeIsOne(t *testing.T) {
	for w := range interrogatives {
		for _, s := range []string{w, strings.ToUpper(w), strings.ToUpper(w[:1]) + w[1:]} {
			if !isInterrogative(s) || !isQuestion(s+" it") {
				t.Errorf("%q is not taken as an interrogative", s)
			}
		}
	}
}
