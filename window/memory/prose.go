package memory

import "strings"

// The fact analysis reads prose only. Code is not what a person states: a
// value written in a program (`city = "London"`, `ForeignKey`, a column
// typed REAL) is the program's, and the capitalized identifiers of code
// read as names; sentences of code are neither the speaker's nor anyone's
// statements. Code is delimited as CommonMark delimits it, the markup
// assistant conversations are written in:
//
//   - a fenced block: a line of three or more backticks or tildes (at most
//     three spaces in) up to a line of at least as many of the same, or the
//     text's end when none closes it;
//   - an indented block: lines indented by four spaces or a tab, after a
//     blank line (an indented line cannot interrupt a paragraph), and not
//     under a list item (there indentation continues the item), with the
//     blank lines between them;
//   - an inline span: a run of backticks up to the next run of as many,
//     within one paragraph; a run with no match is a literal backtick.
//
// A block gives way to a line break, which ends the sentence before it.
// An inline span gives way to "it", a pronoun the analysis reads as neither
// a name nor part of a value: the sentence keeps its other words in their
// places ("I call `fetchData()` on load" reads "I call it on load"), and
// no value spans the gap.

// proseSpan stands in for an inline code span (see above).
const proseSpan = "it"

// mayHoldCode says whether text holds a byte that can delimit code: a
// backtick, a tilde, a tab or four spaces. Each is looked for by
// strings.IndexByte, which reads many bytes at once (ContainsAny reads
// one at a time, and this is asked of every long turn a search reads).
func mayHoldCode(text string) bool {
	return strings.IndexByte(text, '`') >= 0 || strings.IndexByte(text, '~') >= 0 ||
		strings.IndexByte(text, '\t') >= 0 || strings.Contains(text, "    ")
}

// prose returns text without its code (see above).
func prose(text string) string {
	if !mayHoldCode(text) {
		return text // no code can be delimited
	}
	var out, para strings.Builder
	flush := func() {
		out.WriteString(withoutSpans(para.String()))
		para.Reset()
	}
	fence := ""                  // the open fence's marker, "" outside one
	blank, listed := true, false // the line before was blank; the last prose line was a list item's
	inIndented := false
	for _, line := range strings.SplitAfter(text, "\n") {
		body := strings.TrimRight(line, "\r\n")
		if fence != "" {
			if closesFence(body, fence) {
				fence = ""
			}
			continue
		}
		opens := fenceOf(body)
		switch {
		case opens != "":
			fence = opens
			flush()
			out.WriteByte('\n')
			blank, inIndented = true, false
			continue
		case strings.TrimSpace(body) == "":
			if !inIndented {
				para.WriteString(line)
			}
			flush()
			blank = true
			continue
		case indented(body) && (inIndented || (blank && !listed)):
			if !inIndented {
				flush()
				out.WriteByte('\n')
			}
			inIndented, blank = true, false
			continue
		}
		inIndented, blank = false, false
		listed = listItem(body) || (listed && indentOf(body) > 0)
		para.WriteString(line)
	}
	flush()
	return out.String()
}

// fenceOf returns the fence line opens with (its backticks or tildes) or "".
func fenceOf(line string) string {
	rest := strings.TrimLeft(line, " ")
	if len(line)-len(rest) > 3 || len(rest) < 3 || (rest[0] != '`' && rest[0] != '~') {
		return ""
	}
	n := 0
	for n < len(rest) && rest[n] == rest[0] {
		n++
	}
	if n < 3 || (rest[0] == '`' && strings.Contains(rest[n:], "`")) {
		return "" // a backtick fence's info string has no backtick
	}
	return rest[:n]
}

// closesFence reports whether line closes the fenced block fence opened.
func closesFence(line, fence string) bool {
	rest := strings.TrimLeft(line, " ")
	if len(line)-len(rest) > 3 {
		return false
	}
	marks := strings.TrimLeft(rest, fence[:1])
	return len(rest)-len(marks) >= len(fence) && strings.TrimSpace(marks) == ""
}

// indentOf returns line's leading columns, a tab counting four.
func indentOf(line string) int {
	n := 0
	for _, c := range line {
		switch c {
		case ' ':
			n++
		case '\t':
			n += 4
		default:
			return n
		}
	}
	return n
}

// indented reports whether line is indented as code is.
func indented(line string) bool { return indentOf(line) >= 4 }

// listItem reports whether line opens a list item: "-", "*" or "+", or a
// number and "." or ")", followed by a space.
func listItem(line string) bool {
	s := strings.TrimLeft(line, " \t")
	if len(s) >= 2 && strings.ContainsRune("-*+", rune(s[0])) && s[1] == ' ' {
		return true
	}
	i := 0
	for i < len(s) && i < 9 && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i > 0 && i+1 < len(s) && (s[i] == '.' || s[i] == ')') && s[i+1] == ' '
}

// withoutSpans replaces paragraph's inline code spans by proseSpan.
func withoutSpans(paragraph string) string {
	if !strings.Contains(paragraph, "`") {
		return paragraph
	}
	var out strings.Builder
	for {
		i := strings.IndexByte(paragraph, '`')
		if i < 0 {
			break
		}
		n := backticks(paragraph[i:])
		end := closingRun(paragraph[i+n:], n)
		if end < 0 {
			out.WriteString(paragraph[:i+n]) // literal backticks
			paragraph = paragraph[i+n:]
			continue
		}
		out.WriteString(paragraph[:i])
		out.WriteString(proseSpan)
		paragraph = paragraph[i+n+end+n:]
	}
	out.WriteString(paragraph)
	return out.String()
}

// backticks returns the length of the run of backticks s starts with.
func backticks(s string) int {
	n := 0
	for n < len(s) && s[n] == '`' {
		n++
	}
	return n
}

// closingRun returns the offset in s of the first run of exactly n
// backticks, or -1.
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		m := backticks(s[i:])
		if m == n {
			return i
		}
		i += m
	}
	return -1
}
