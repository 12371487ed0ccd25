package window

import (
	"strings"
	"unicode"

	"kvwin/window/memory"
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
// or a verb of request ("what", "did", "tell", ..., any case), and it is
// no longer than longAsk. Questions and requests ask for recall;
// statements rarely need old turns quoted back, and their lexical hits
// must be beyond chance over the whole memory (memory.Query.Statement).
func isQuestion(ask string) bool {
	if len(ask) > longAsk {
		return false
	}
	if strings.Contains(ask, "?") || strings.Contains(ask, "？") {
		return true
	}
	return interrogatives[strings.ToLower(firstWord(ask))]
}

// longAsk is the length in bytes past which an ask is a statement whatever
// it asks: one passage of memory's (the unit it quotes by). Such an ask
// brings the material it asks about (a paste, code, a draft, the error and
// the file it came from), and in an assistant chat it is most of what
// users send: read as questions, they took the question's packet at almost
// every turn, and each packet costs its turn and the next their reuse
// (docs/window.md, The reuse allowance).
const longAsk = memory.PassageBytes

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
