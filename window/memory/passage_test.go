package memory

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

func TestPassagesFollowTheRule(t *testing.T) {
	var b strings.Builder
	for p := 0; p < 6; p++ {
		fmt.Fprintf(&b, "Paragraph %d opens here. %s It ends now.\n\n", p, strings.Repeat("Some words of it. ", 12))
	}
	b.WriteString("```go\nfunc main() {\n\n\tfmt.Println(\"hi\")\n}\n```\n\n")
	b.WriteString(strings.Repeat("averyveryverylongwordwithoutanyspace", 40) + "\n")
	text := b.String()
	ps := passages(text)
	if len(ps) < 6 {
		t.Fatalf("%d passages of %d bytes", len(ps), len(text))
	}
	last := 0
	for i, p := range ps {
		if p.from < last || p.to <= p.from || p.to-p.from > maxPassage {
			t.Fatalf("passage %d = [%d, %d): out of order or over %d bytes", i, p.from, p.to, maxPassage)
		}
		if gap := text[last:p.from]; strings.TrimSpace(gap) != "" {
			t.Fatalf("text %q between passages is in none", gap)
		}
		last = p.to
	}
	if strings.TrimSpace(text[last:]) != "" {
		t.Fatal("the end of the text is in no passage")
	}
	code := false
	for _, p := range ps {
		if s := text[p.from:p.to]; strings.Contains(s, "```go") {
			code = strings.Contains(s, "fmt.Println") && strings.Contains(s, "}\n```")
		}
	}
	if !code {
		t.Fatal("the code block, shorter than a passage, was split at its blank line")
	}
}

// A long answer is quoted by the passage that holds what the ask names,
// and costs only that passage.
func TestLongTurnsAreQuotedByTheirPassage(t *testing.T) {
	var b strings.Builder
	for p := 0; p < 12; p++ {
		if p == 7 {
			b.WriteString("The vault of Zephyrine opens with the code 4417, kept by the night porter.\n\n")
			continue
		}
		fmt.Fprintf(&b, "Section %d. %s\n\n", p, strings.Repeat(fmt.Sprintf("Filler sentence number %d about gardens. ", p), 8))
	}
	x := NewIndex(gardenTurns(9, b.String())...)
	hits := x.Search(Query{Ask: "What is the vault code of Zephyrine?", K: 10, Tokens: 400,
		Cost: func(t Turn) int { return (len(t.Text) + 3) / 4 }})
	for _, h := range hits {
		if h.Pos != 9 {
			continue
		}
		if !strings.HasPrefix(h.Part, "passage ") || !strings.Contains(h.Text, "4417") || len(h.Text) > maxPassage {
			t.Fatalf("long hit: part %q, %d bytes: %.80q", h.Part, len(h.Text), h.Text)
		}
		return
	}
	t.Fatalf("the long answer holding the code is not a hit: %+v", hits)
}

// gardenTurns is 20 short turns about gardens, the one at pos replaced by
// text.
func gardenTurns(pos int, text string) []Turn {
	var turns []Turn
	for i := 0; i < 20; i++ {
		role, txt := "user", fmt.Sprintf("Question %d about the weather and gardens?", i)
		if i%2 == 1 {
			role, txt = "assistant", fmt.Sprintf("Answer %d: mild weather for gardens.", i)
		}
		if i == pos {
			txt = text
		}
		turns = append(turns, Turn{Pos: i, Role: role, Text: txt})
	}
	return turns
}

// A long turn of at most four passages (a request and the code it asks
// about) is quoted whole where whole it takes at most half of the room,
// and by its passage where it would take more; a longer one always by its
// passage, and it costs what is quoted.
func TestShortLongTurnsAreQuotedWhole(t *testing.T) {
	turn := func(n int) string {
		var b strings.Builder
		for p := 0; b.Len() < n; p++ {
			if p == 1 {
				b.WriteString("The vault of Zephyrine opens with the code 4417, kept by the night porter.\n\n")
				continue
			}
			fmt.Fprintf(&b, "Section %d. %s\n\n", p, strings.Repeat(fmt.Sprintf("Filler sentence number %d about gardens. ", p), 4))
		}
		return b.String()
	}
	cost := func(t Turn) int { return (len(t.Text) + 3) / 4 }
	for _, c := range []struct {
		bytes int
		room  func(whole int) int // of the turn's cost whole
		whole bool
	}{
		{1500, func(n int) int { return 2 * n }, true},          // half the room: whole
		{1500, func(n int) int { return 2*n - 2 }, false},       // over half: its passage
		{quoteWhole + 600, func(int) int { return 1e6 }, false}, // over four passages: its passage, whatever the room
	} {
		text := turn(c.bytes)
		room := c.room(cost(Turn{Text: text}))
		if len(text) <= longTurn || (len(text) <= quoteWhole) != (c.bytes <= quoteWhole) {
			t.Fatalf("the test's turn of %d bytes is not what the case needs", len(text))
		}
		hits := NewIndex(gardenTurns(8, text)...).Search(Query{Ask: "What is the vault code of Zephyrine?", K: 10, Tokens: room, Cost: cost})
		i := slices.IndexFunc(hits, func(h Hit) bool { return h.Pos == 8 })
		if i < 0 {
			t.Fatalf("%d bytes, room %d: the turn holding the code is not a hit: %+v", len(text), room, hits)
		}
		h := hits[i]
		if whole := h.Part == "" && h.Text == text; whole != c.whole || h.Cost != cost(h.Turn) || !strings.Contains(h.Text, "4417") {
			t.Errorf("%d bytes, room %d: part %q, %d bytes quoted, cost %d; want whole=%v", len(text), room, h.Part, len(h.Text), h.Cost, c.whole)
		}
	}
}

// A long turn's passage score (passageScores, with the stems every passage
// holds summed once per turn) is the best of its passages' sums of the
// ask's weights, computed passage by passage.
func TestPassageScoresAreTheBestPassagesSum(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	vocab := []string{"schema", "cache", "retry", "budget", "latency", "deploy", "index", "tenant", "quota", "replica"}
	var turns []Turn
	for i := 0; i < 60; i++ {
		if i%3 != 0 {
			turns = append(turns, Turn{Pos: i, Role: "user", Text: fmt.Sprintf("Short note %d on %s.", i, vocab[r.Intn(len(vocab))])})
			continue
		}
		topic := vocab[r.Intn(len(vocab))] // in every paragraph of the turn
		var b strings.Builder
		for p := 0; p < 2+r.Intn(6); p++ {
			fmt.Fprintf(&b, "On %s: %s", topic, strings.Repeat("plain filler words again and again. ", 6))
			for k := r.Intn(3); k > 0; k-- {
				fmt.Fprintf(&b, "Also %s. ", vocab[r.Intn(len(vocab))])
			}
			b.WriteString("\n\n")
		}
		turns = append(turns, Turn{Pos: i, Role: "assistant", Text: b.String()})
	}
	x := NewIndex(turns...)
	if len(x.pall) == 0 || len(x.ppost) == 0 {
		t.Fatalf("want stems in every passage and in some: pall %d, ppost %d", len(x.pall), len(x.ppost))
	}
	for trial := 0; trial < 50; trial++ {
		var qstems []string
		for _, w := range r.Perm(len(vocab))[:1+r.Intn(4)] {
			qstems = append(qstems, x.stems.stem(vocab[w]))
		}
		limit := 1 + r.Intn(len(turns))
		weight := x.askWeights(qstems, limit)
		sb := x.lexical(qstems, limit, float64(x.prefix[limit])/float64(limit))
		before := slices.Clone(sb.acc[:len(turns)])
		x.passageScores(sb, qstems, weight, limit)
		for d := 0; d < len(turns); d++ {
			want := before[d]
			if pt, ok := x.long[int32(d)]; ok && d < limit && before[d] > 0 {
				best, sums := 0.0, []float64{}
				for _, stems := range pt.stems {
					sum := 0.0
					for _, st := range qstems {
						if slices.Contains(stems, st) {
							sum += weight[st]
						}
					}
					best, sums = max(best, sum), append(sums, sum)
				}
				if best > 0 {
					want = best
					// Quoted by the passage it ranks by: the first best.
					first := slices.IndexFunc(sums, func(v float64) bool { return v > best-1e-9 })
					if q := x.board.pquote[d]; int(q)-1 != first {
						t.Fatalf("ask %v below %d, turn %d: quoted by passage %d, want %d of sums %v", qstems, limit, d, q-1, first, sums)
					}
				}
			}
			if math.Abs(sb.acc[d]-want) > 1e-9 {
				t.Fatalf("ask %v below %d, turn %d: score %v, want %v", qstems, limit, d, sb.acc[d], want)
			}
		}
	}
}

// hasWord is slices.Contains(strings.Fields(words), w) without the split.
func TestHasWordIsAFieldOf(t *testing.T) {
	for _, c := range []struct{ words, w string }{
		{"omar moved to oslo", "oslo"}, {"omar moved to oslo", "omar"}, {"omar moved to oslo", "mov"},
		{"omar  moved\tto oslo", "moved"}, {"omaromar omar", "omar"}, {"omaromar", "omar"}, {"", "x"},
		{"a b", ""}, {"new york city", "new york"}, {"café\u00a0bar", "bar"}, {"x\u2003y", "y"}, {"xy y", "y"},
	} {
		if got, want := hasWord(c.words, c.w), slices.Contains(strings.Fields(c.words), c.w); got != want {
			t.Errorf("hasWord(%q, %q) = %v, want %v", c.words, c.w, got, want)
		}
	}
}

// A stem more turns hold than a search examines (maxExamined) scores the
// turns a rarer stem of the ask reaches and its newest maxExamined turns,
// each exactly as an unbounded BM25 would, its passages included; no
// other turn.
func TestACommonStemScoresOnlyTheTurnsASearchExamines(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	rare := []string{"zephyr", "quokka", "marlin"}
	var turns []Turn
	for i := 0; i < 3*maxExamined; i++ {
		text := fmt.Sprintf("Status note %d.", i)
		if r.Intn(40) == 0 {
			text = fmt.Sprintf("Status of %s, note %d.", rare[r.Intn(len(rare))], i)
		}
		if i%2 == 1 { // long: the common stem in every passage, a rare one in some
			var b strings.Builder
			for p := 0; p < 5; p++ {
				fmt.Fprintf(&b, "On the status: %s", strings.Repeat("plain filler words again and again. ", 6))
				if r.Intn(30) == 0 {
					fmt.Fprintf(&b, "Also %s. ", rare[r.Intn(len(rare))])
				}
				if r.Intn(2) == 0 {
					b.WriteString("A release follows. ")
				}
				b.WriteString("\n\n")
			}
			text = b.String()
		}
		turns = append(turns, Turn{Pos: i, Role: []string{"user", "assistant"}[i%2], Text: text})
	}
	x := NewIndex(turns...)
	status, release := x.stems.stem("status"), x.stems.stem("release")
	for trial := 0; trial < 20; trial++ {
		qstems := []string{status}
		if trial%4 != 3 {
			qstems = append(qstems, x.stems.stem(rare[trial%3]))
		}
		if trial%2 == 0 {
			qstems = append(qstems, release)
		}
		r.Shuffle(len(qstems), func(i, j int) { qstems[i], qstems[j] = qstems[j], qstems[i] })
		limit := maxExamined + 1 + r.Intn(len(turns)-maxExamined)
		avg := float64(x.prefix[limit]) / float64(limit)
		// The unbounded scores, and the turns a bounded search examines.
		want, examined := make([]float64, len(turns)), map[int32]bool{}
		for _, term := range qstems {
			ps := x.postings(term, limit)
			idf := bm25IDF(limit, len(ps))
			for k, p := range ps {
				want[p.doc] += idf * bm25TF(float64(p.tf), float64(x.lens[p.doc]), avg)
				if len(ps) <= maxExamined || k >= len(ps)-maxExamined {
					examined[p.doc] = true
				}
			}
		}
		if len(x.postings(status, limit)) <= maxExamined {
			t.Fatalf("the common stem is in %d turns", len(x.postings(status, limit)))
		}
		weight := x.askWeights(qstems, limit)
		sb := x.lexical(qstems, limit, avg)
		if len(sb.touched) != len(examined) {
			t.Fatalf("ask %v below %d: %d turns scored, want %d", qstems, limit, len(sb.touched), len(examined))
		}
		for _, d := range sb.touched {
			if !examined[d] || math.Abs(sb.acc[d]-want[d]) > 1e-9 {
				t.Fatalf("ask %v below %d, turn %d: examined %v, score %v, want %v", qstems, limit, d, examined[d], sb.acc[d], want[d])
			}
		}
		x.passageScores(sb, qstems, weight, limit)
		long := 0
		for d := range examined {
			pt, ok := x.long[d]
			if !ok {
				continue
			}
			long++
			best := 0.0
			for _, stems := range pt.stems {
				sum := 0.0
				for _, st := range qstems {
					if slices.Contains(stems, st) {
						sum += weight[st]
					}
				}
				best = max(best, sum)
			}
			if math.Abs(sb.acc[d]-best) > 1e-9 {
				t.Fatalf("ask %v below %d, long turn %d: score %v, want its best passage's %v", qstems, limit, d, sb.acc[d], best)
			}
		}
		if long == 0 {
			t.Fatalf("ask %v below %d: no long turn examined", qstems, limit)
		}
	}
}
