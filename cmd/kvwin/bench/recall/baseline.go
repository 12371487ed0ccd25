package recall

import (
	"math"
	"sort"
	"strings"
	"unicode"

	"kvwin/engine"
	"kvwin/window"
)

// PolicyBM25 is the bench's reference policy, not a window policy a server
// offers: recency fills half the budget, a plain BM25 packet the other half
// (lower-cased alphanumeric words, k1 1.2, b 0.75; ../shared/data/README.md).
// Every run shows it beside the memory policy as the baseline to beat.
const PolicyBM25 = "bm25"

// baseline is the window of PolicyBM25 for msgs (the last is the ask).
type baseline struct {
	Start  int   // first message kept by recency
	Packet []int // evicted messages in the packet, by position
	Tokens int   // kept plus packet tokens
}

// bm25Window cuts msgs the reference way: the most recent whole messages
// (the ask always) up to half the budget, then the best BM25 matches of the
// ask among the rest, best first, while they fit the other half.
func bm25Window(msgs []engine.Message, count window.Counter, speaker func(engine.Message) string, budget int) baseline {
	n := len(msgs)
	half := budget / 2
	b := baseline{Start: n - 1}
	for b.Start > 0 && b.Tokens+count(msgs[b.Start-1]) <= half {
		b.Start--
		b.Tokens += count(msgs[b.Start])
	}
	if b.Start == 0 {
		return b
	}
	docs := make([][]string, b.Start)
	total := 0
	for i := range docs {
		docs[i] = plainWords(speaker(msgs[i]) + ": " + msgs[i].Content)
		total += len(docs[i])
	}
	avg := float64(total) / float64(len(docs))
	df := map[string]int{}
	for _, d := range docs {
		seen := map[string]bool{}
		for _, w := range d {
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
	}
	// The ask's distinct words in sorted order: a score is summed over
	// them in the same order every run, so equal documents tie exactly
	// and the packet does not depend on map iteration order.
	query := map[string]bool{}
	for _, w := range plainWords(msgs[n-1].Content) {
		query[w] = true
	}
	qwords := make([]string, 0, len(query))
	for w := range query {
		qwords = append(qwords, w)
	}
	sort.Strings(qwords)
	type scored struct {
		pos   int
		score float64
	}
	var cands []scored
	for i, d := range docs {
		tf := map[string]int{}
		for _, w := range d {
			if query[w] {
				tf[w]++
			}
		}
		var s float64
		for _, w := range qwords {
			f, ok := tf[w]
			if !ok {
				continue
			}
			idf := math.Log(1 + (float64(len(docs)-df[w])+0.5)/(float64(df[w])+0.5))
			s += idf * float64(f) * 2.2 / (float64(f) + 1.2*(0.25+0.75*float64(len(d))/avg))
		}
		if s > 0 && i < b.Start {
			cands = append(cands, scored{i, s})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].pos > cands[j].pos
	})
	room := half
	b.Tokens += count(msgs[n-1])
	for _, c := range cands {
		if t := count(msgs[c.pos]); t <= room {
			room -= t
			b.Tokens += t
			b.Packet = append(b.Packet, c.pos)
		}
	}
	sort.Ints(b.Packet)
	return b
}

// plainWords splits text into lower-cased runs of letters and digits.
func plainWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
}

// rendered returns the baseline's window as messages: the packet's turns
// quoted ahead of the ask, after the recent messages.
func (b baseline) rendered(msgs []engine.Message) []engine.Message {
	out := append([]engine.Message(nil), msgs[b.Start:len(msgs)-1]...)
	var sb strings.Builder
	for _, p := range b.Packet {
		sb.WriteString(msgs[p].Role)
		sb.WriteString(": ")
		sb.WriteString(msgs[p].Content)
		sb.WriteString("\n")
	}
	ask := msgs[len(msgs)-1]
	ask.Content = sb.String() + ask.Content
	return append(out, ask)
}
