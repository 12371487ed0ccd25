package memory

import (
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

// Two tokenizers live here, for two jobs.
//
// terms (lexical search) lower-cases and splits on everything that is not a
// letter or a digit, exactly as SQLite FTS5's unicode61 tokenizer does with
// remove_diacritics 0, so the store's FTS5 index and the in-memory index agree
// on what a term is and score a turn the same way.
//
// words (fact analysis) keeps case, and keeps apostrophes and hyphens inside a
// word ("on-call", "Omar's"), because the fact analysis needs capitals to find
// names and whole words to find the values said about them.

// terms returns the lexical terms of text in order.
func terms(text string) []string {
	var out []string
	start := -1
	for i, r := range text {
		if unicode.IsLetter(r) || unicode.IsNumber(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out = append(out, strings.ToLower(text[start:i]))
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, strings.ToLower(text[start:]))
	}
	return out
}

// stem returns the Snowball (Porter2) English stem of a lower-case term:
// "moved", "moving" and "moves" are one term. Terms that are not plain
// ASCII words (numbers, other scripts) are kept as they are.
func stem(term string) string {
	for i := 0; i < len(term); i++ {
		if c := term[i]; c < 'a' || c > 'z' {
			return term
		}
	}
	return english.Stem(term, true)
}

// stemmer stems with a memo: a conversation reuses its words, and stemming
// costs more than a lookup. Each Index has its own, so no conversation's
// words warm another's (not even as timing). Not safe for concurrent use.
type stemmer map[string]string

// maxStems bounds a stem memo.
const maxStems = 1 << 15

func (m stemmer) stem(term string) string {
	if s, ok := m[term]; ok {
		return s
	}
	s := stem(term)
	if len(m) >= maxStems {
		clear(m)
	}
	m[term] = s
	return s
}

// indexTerms returns the stems of text's content words (stopwords and
// single letters left out: no ask searches for them) and the count of all
// its terms, the length BM25 normalises by.
func (m stemmer) indexTerms(text string) ([]string, int) {
	all := terms(text)
	out := make([]string, 0, len(all))
	for _, t := range all {
		if stopword[t] || utf8.RuneCountInString(t) < 2 {
			continue
		}
		out = append(out, m.stem(t))
	}
	return out, len(all)
}

// queryTerms returns the distinct terms of an ask worth searching for: no
// stopwords, no single letters (the "s" of "Omar's"), in first-seen order so
// that scoring is deterministic.
func queryTerms(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range terms(text) {
		if seen[t] || stopword[t] || utf8.RuneCountInString(t) < 2 {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return out
}

// pronounClause reports whether rest (after a colon) opens with "he" or
// "she" as a word ("she's" included).
func pronounClause(rest string) bool {
	w := firstWordOf(strings.TrimLeft(rest, " "))
	return w == "he" || w == "she"
}

// firstWordOf returns s's leading letters, lower-cased.
func firstWordOf(s string) string {
	end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(s)
	}
	return strings.ToLower(s[:end])
}

// word is one word of a sentence as the fact analysis sees it.
type word struct {
	text  string // as written, without a possessive 's
	lower string
	cap   bool // starts with an upper-case letter
	poss  bool // written with 's ("Omar's", also "she's")
}

// sentences splits the prose of text (its code left out: see prose) into
// sentences: at ., ! or ? followed by a space, at line breaks, and at a
// colon or semicolon followed by "he" or "she" (a clause of its own about
// someone the part before names: "I spoke to Astrid: she's switched to
// rowing"). Abbreviations may split a sentence in two; that only costs a
// fact, never invents one.
func sentences(text string) []string {
	return slices.Collect(sentencesOf(text))
}

// sentencesOf yields text's sentences one by one (see sentences), so a
// reader that stops early splits no more of a long turn than it reads.
func sentencesOf(text string) iter.Seq[string] {
	return func(yield func(string) bool) {
		text := prose(text) // each pass reads the text as given
		start := 0
		for i := 0; i < len(text); i++ {
			c := text[i]
			end := -1
			switch {
			case c == '\n':
				end = i
			case (c == '.' || c == '!' || c == '?') && i+1 < len(text) && (text[i+1] == ' ' || text[i+1] == '\n'):
				end = i + 1
			case (c == ':' || c == ';') && pronounClause(text[i+1:]):
				end = i + 1
			}
			if end < 0 {
				continue
			}
			if s := strings.TrimSpace(text[start:end]); s != "" && !yield(s) {
				return
			}
			start = end
		}
		if s := strings.TrimSpace(text[start:]); s != "" {
			yield(s)
		}
	}
}

// clauses splits a sentence after each comma or colon followed by a space.
// The fact analysis drops leading clauses ("By the way,", "Update on Nora:")
// to find the frame a statement shares with others.
func clauses(sentence string) []string {
	var out []string
	start := 0
	for i := 0; i+1 < len(sentence); i++ {
		if (sentence[i] == ',' || sentence[i] == ':' || sentence[i] == ';') && sentence[i+1] == ' ' {
			out = append(out, sentence[start:i+1])
			start = i + 2
		}
	}
	return append(out, sentence[start:])
}

// words returns the words of s. Articles are dropped: "has a parrot" and "has
// two rabbits" should share the frame "has _".
func words(s string) []word {
	var out []word
	isWordRune := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }
	rs := []rune(s)
	for i := 0; i < len(rs); {
		if !isWordRune(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && (isWordRune(rs[j]) || ((rs[j] == '\'' || rs[j] == '’' || rs[j] == '-') && j+1 < len(rs) && isWordRune(rs[j+1]))) {
			j++
		}
		text := string(rs[i:j])
		poss := false
		for _, suffix := range []string{"'s", "’s"} {
			if len(text) > len(suffix) && strings.HasSuffix(text, suffix) {
				text, poss = strings.TrimSuffix(text, suffix), true
			}
		}
		lower := strings.ToLower(text)
		i = j
		if article[lower] {
			continue
		}
		first, _ := utf8.DecodeRuneInString(text)
		out = append(out, word{text: text, lower: lower, cap: unicode.IsUpper(first), poss: poss})
	}
	return out
}

var article = map[string]bool{"a": true, "an": true, "the": true}

// firstPerson are the words by which a speaker names themself; a statement
// whose subject is one of them is about the speaker (the turn's role).
var firstPerson = map[string]bool{"i": true, "i'm": true, "i've": true, "i'll": true, "i'd": true, "me": true, "my": true, "mine": true}

// stopword is a general English function-word list (NLTK's, abridged). It is
// not tuned to any data set: a term on it carries no topic.
var stopword = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`i me my myself we our ours ourselves you your yours yourself yourselves
he him his himself she her hers herself it its itself they them their theirs themselves what which who
whom this that these those am is are was were be been being have has had having do does did doing a an
the and but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here there
when where why how all any both each few more most other some such no nor not only own same so than too
very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma
mightn mustn needn shan shouldn wasn weren won wouldn could would shall may might must i'm i've i'll i'd
it's that's there's what's let's also ever`) {
		m[w] = true
	}
	return m
}()
