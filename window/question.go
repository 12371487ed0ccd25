package window

import (
	"strings"
	"unicode"
	"unicode/utf8"

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
	return isInterrogative(firstWord(ask))
}

// isInterrogative is interrogatives[strings.ToLower(w)], lowering an ASCII
// word on the stack: a cut reads the asks of a long history's question
// zone and of its question share, hundreds a turn, and lowering each was
// a copy.
func isInterrogative(w string) bool {
	var buf [len("summarize")]byte // the longest interrogative (TestEveryInterrogativeIsOne)
	for i := 0; i < len(w); i++ {
		if w[i] >= utf8.RuneSelf {
			return interrogatives[strings.ToLower(w)]
		}
	}
	if len(w) > len(buf) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return interrogatives[string(buf[:len(w)])]
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
// no further than its end. An ASCII word is read byte by byte.
func firstWord(s string) string {
	for i := 0; i < len(s) && s[i] < utf8.RuneSelf; i++ {
		if !asciiLetter(s[i]) {
			continue
		}
		j := i + 1
		for j < len(s) && asciiLetter(s[j]) {
			j++
		}
		if j == len(s) || s[j] < utf8.RuneSelf {
			return s[i:j]
		}
		break // the word may go on in a letter past ASCII
	}
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

// asciiLetter is unicode.IsLetter for an ASCII byte.
func asciiLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
