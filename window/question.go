package window

import (
	"strings"
	"unicode"
)

// interrogatives are the words an information-seeking ask starts with:
// the wh-words and the auxiliaries of a yes/no question.
var interrogatives = map[string]bool{
	"what": true, "who": true, "when": true, "where": true, "why": true, "how": true,
	"which": true, "whose": true, "whom": true,
	"do": true, "does": true, "did": true, "is": true, "are": true, "was": true, "were": true,
	"can": true, "could": true, "would": true, "should": true, "will": true,
	"have": true, "has": true, "had": true,
	// The imperatives of asking for what was said: a request ("Tell me
	// about the flute", "Remind me what Omar said") seeks information as a
	// question does.
	"tell": true, "remind": true, "show": true, "list": true, "describe": true,
	"explain": true, "summarize": true, "summarise": true, "recall": true,
	"repeat": true, "please": true,
}

// isQuestion reports whether an ask seeks information: it holds a question
// mark ('?' or '？') or its first word is an interrogative, an auxiliary
// or a verb of request ("what", "did", "tell", ..., any case). Questions
// and requests ask for recall; statements rarely need old turns quoted
// back, and their lexical hits must be beyond chance over the whole
// memory (memory.Query.Statement).
func isQuestion(ask string) bool {
	if strings.Contains(ask, "?") || strings.Contains(ask, "？") {
		return true
	}
	return interrogatives[strings.ToLower(firstWord(ask))]
}

// firstWord returns the first run of letters in s ("" if none), reading
// no further than its end.
func firstWord(s string) string {
	start := strings.IndexFunc(s, unicode.IsLetter)
	if start < 0 {
		return ""
	}
	end := strings.IndexFunc(s[start:], func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		return s[start:]
	}
	return s[start : start+end]
}
