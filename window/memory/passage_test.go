package memory

import (
	"fmt"
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
	var turns []Turn
	for i := 0; i < 20; i++ {
		role, text := "user", fmt.Sprintf("Question %d about the weather and gardens?", i)
		if i%2 == 1 {
			role, text = "assistant", fmt.Sprintf("Answer %d: mild weather for gardens.", i)
		}
		if i == 9 {
			text = b.String()
		}
		turns = append(turns, Turn{Pos: i, Role: role, Text: text})
	}
	x := NewIndex(turns...)
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
