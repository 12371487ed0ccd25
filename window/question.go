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
}

// isQuestion reports whether an ask seeks information: it holds a question
// mark ('?' or '？') or its first word is an interrogative or an auxiliary
// ("what", "did", ..., any case). Questions ask for recall; statements
// rarely need old turns quoted back.
func isQuestion(ask string) bool {
	if strings.ContainsAny(ask, "?？") {
		return true
	}
	first := strings.FieldsFunc(ask, func(r rune) bool { return !unicode.IsLetter(r) })
	if len(first) == 0 {
		return false
	}
	return interrogatives[strings.ToLower(first[0])]
}
