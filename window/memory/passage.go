package memory

import (
	"fmt"
	"slices"
	"strings"
)

// Passages. A long turn (an assistant's answer, a pasted file) is quoted in
// a packet by the passage that matches the ask, not whole: a packet sized
// by the ask then holds the answer's relevant paragraph and the short turns
// around it, where one long turn that happened to score first would take
// all its room. Retrieval still ranks whole turns (a turn's terms, its
// neighbours, its facts); the passage is what a long hit costs and shows.
//
// The rule: a passage is at most maxPassage bytes (about 128 tokens, a long
// paragraph). A turn is split into units — sentences in prose, lines in a
// fenced code block (``` … ```), and a single unit longer than a passage at
// its last whitespace — and units are packed in order into passages; a
// paragraph break (a blank line outside code, or the edge of a code block)
// ends a passage that is at least half full. A turn longer than two
// passages is long: it ranks by its best passage. A long turn of at most
// four passages (quoteWhole) is still quoted whole where that takes at
// most half of the packet's room (Index.quoted): the passage it ranked by
// is a good part of it, and the rest is that passage's own context (a
// request and the code it asks about). Longer turns (most assistant
// answers, pasted files) are quoted by their passage.
const (
	maxPassage = PassageBytes
	longTurn   = 2 * maxPassage
	quoteWhole = 4 * maxPassage
)

// PassageBytes is the most bytes one passage holds: the unit memory
// quotes a long turn by (the rule above).
const PassageBytes = 512

// span is a passage: text[from:to] of its turn.
type span struct{ from, to int }

// passages splits text into passages by the rule above.
func passages(text string) []span {
	var out []span
	cur := span{-1, -1}
	flush := func() {
		if cur.from >= 0 && strings.TrimSpace(text[cur.from:cur.to]) != "" {
			out = append(out, cur)
		}
		cur = span{-1, -1}
	}
	add := func(u span, breakBefore bool) {
		switch {
		case cur.from < 0:
			cur = u
		case u.to-cur.from > maxPassage || breakBefore && cur.to-cur.from >= maxPassage/2:
			flush()
			cur = u
		default:
			cur.to = u.to
		}
	}
	code, breakNext := false, false
	for at := 0; at < len(text); {
		end := strings.IndexByte(text[at:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += at + 1
		}
		line := text[at:end]
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			code = !code
			add(span{at, end}, true)
			breakNext = !code
		case trimmed == "" && !code:
			breakNext = true
			if cur.from >= 0 {
				cur.to = end
			}
		case code:
			for _, u := range units(text, at, end, nil) {
				add(u, breakNext)
				breakNext = false
			}
		default:
			for _, u := range units(text, at, end, sentenceEnds) {
				add(u, breakNext)
				breakNext = false
			}
		}
		at = end
	}
	flush()
	return out
}

// units splits text[from:to] at the ends ends finds (nil: none, the line
// is one unit), and any unit longer than a passage at its last whitespace
// within it (or a rune boundary).
func units(text string, from, to int, ends func(string) []int) []span {
	var cuts []int
	if ends != nil {
		for _, e := range ends(text[from:to]) {
			cuts = append(cuts, from+e)
		}
	}
	cuts = append(cuts, to)
	var out []span
	start := from
	for _, c := range cuts {
		for c-start > maxPassage {
			cut := start + len(cutSpace(text[start:], maxPassage))
			if cut <= start {
				cut = c
			}
			out = append(out, span{start, cut})
			start = cut
		}
		if c > start {
			out = append(out, span{start, c})
			start = c
		}
	}
	return out
}

// sentenceEnds returns the offsets just past each sentence end in s: '.',
// '!' or '?' (with closing quotes or brackets) before whitespace.
func sentenceEnds(s string) []int {
	var out []int
	for i := 0; i < len(s)-1; i++ {
		switch s[i] {
		case '.', '!', '?':
			j := i + 1
			for j < len(s) && strings.IndexByte(`"')]`, s[j]) >= 0 {
				j++
			}
			if j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t') {
				out = append(out, j+1)
				i = j
			}
		}
	}
	return out
}

// cutSpace returns the longest prefix of s of at most n bytes that ends at
// whitespace, or at a rune boundary if none does.
func cutSpace(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for j := n; j > n/2; j-- {
		if s[j-1] == ' ' || s[j-1] == '\n' || s[j-1] == '\t' {
			return s[:j]
		}
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// passageOf returns t as the passage of it that matches the ask best: the
// most distinct ask stems, by weight (their rarity in the history, see
// askWeights); the earlier passage on ties, the first if none matches;
// with Part naming it. A turn the search ranked by its passage is quoted
// by that one, as passageScores found it. A turn that is not long is
// returned whole. Callers hold x.mu.
func (x *Index) passageOf(d int32, weight map[string]float64) Turn {
	t := x.turns[d]
	if len(t.Text) <= longTurn {
		return t
	}
	pt := x.long[d]
	if len(pt.spans) < 2 {
		return t
	}
	if int(d) < len(x.board.pquote) && x.board.pquote[d] > 0 {
		i := x.board.pquote[d]
		return x.quote(t, pt, int(i-1)) // the passage it ranked by (passageScores)
	}
	// The ask has a few stems: comparing with each is cheaper than a
	// map's hashing, hundreds of times per long turn.
	type stemWeight struct {
		stem string
		w    float64
	}
	asked := make([]stemWeight, 0, len(weight))
	for st, w := range weight {
		if _, ok := slices.BinarySearch(pt.all, st); ok {
			asked = append(asked, stemWeight{st, w}) // others add nothing
		}
	}
	if len(asked) == 0 {
		return x.quote(t, pt, 0)
	}
	best, bestScore := 0, 0.0
	for i, stems := range pt.stems {
		score := 0.0
		for _, st := range stems { // in the order the passage says them
			for _, a := range asked {
				if a.stem == st {
					score += a.w
					break
				}
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return x.quote(t, pt, best)
}

// quote returns t as its passage i.
func (x *Index) quote(t Turn, pt passageTerms, i int) Turn {
	p := pt.spans[i]
	t.Text = strings.TrimSpace(t.Text[p.from:p.to])
	t.Part = fmt.Sprintf("passage %d of %d", i+1, len(pt.spans))
	return t
}

// passageTerms is a long turn's passages and, for each, its distinct
// stems in the order it first says them: what passageOf scores. The index
// reads them as it adds the turn (reindex): a search quotes hundreds of
// long turns, and reading their passages was most of its time.
type passageTerms struct {
	spans []span
	stems [][]string
	all   []string // every passage's stems, sorted
	first int32    // the id of its first passage (Index.pdoc)
}

// readPassages returns text's passages and their stems.
func (x *Index) readPassages(text string) passageTerms {
	pt := passageTerms{spans: passages(text)}
	seen := map[string]bool{}
	for _, p := range pt.spans {
		clear(seen)
		var stems []string
		for _, w := range terms(text[p.from:p.to]) {
			if st := x.stems.stem(w); !seen[st] {
				seen[st] = true
				stems = append(stems, st)
			}
		}
		pt.stems = append(pt.stems, stems)
		pt.all = append(pt.all, stems...)
	}
	slices.Sort(pt.all)
	pt.all = slices.Compact(pt.all)
	return pt
}

// askWeights returns the BM25 weight of each of the ask's stems among the
// turns below limit: what a passage holding it scores. Callers hold x.mu.
func (x *Index) askWeights(qstems []string, limit int) map[string]float64 {
	weight := make(map[string]float64, len(qstems))
	for _, st := range qstems {
		weight[st] = bm25IDF(limit, len(x.postings(st, limit)))
	}
	return weight
}
