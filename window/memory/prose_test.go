package memory

import "testing"

// TestProse: code is left out as CommonMark delimits it (fenced blocks,
// indented blocks after a blank line, inline spans), and nothing else is.
func TestProse(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"no code", "Omar moved to Oslo.\nHe likes it.", "Omar moved to Oslo.\nHe likes it."},
		{"fenced", "Here it is:\n```python\nCity = 'London'\n```\nIt fails.", "Here it is:\n\nIt fails."},
		{"tilde fence, longer close", "See:\n~~~\nx = Lisbon\n~~~~\nDone.", "See:\n\nDone."},
		{"a shorter run does not close", "```\na\n``\nb\n```\nDone.", "\nDone."},
		{"unclosed fence runs to the end", "Try:\n```\nOmar = 1\nOmar moved.", "Try:\n\n"},
		{"indented after a blank line", "Run this:\n\n    Omar = Lisbon\n\n    Omar.save()\nThen it works.", "Run this:\n\n\nThen it works."},
		{"indented line in a paragraph", "Omar moved\n    to Oslo.", "Omar moved\n    to Oslo."},
		{"indented under a list item", "- Omar moved.\n\n    He likes Oslo.", "- Omar moved.\n\n    He likes Oslo."},
		{"tab", "Run:\n\n\tOmar()\nOk.", "Run:\n\n\nOk."},
		{"inline", "I call `fetchData()` on load.", "I call it on load."},
		{"inline, double backticks", "Use ``a ` b`` here.", "Use it here."},
		{"unmatched run", "A `` alone, then `x`.", "A `` alone, then it."},
		{"no span across paragraphs", "A `b.\n\nC` d.", "A `b.\n\nC` d."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := prose(tc.text); got != tc.want {
				t.Errorf("prose(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

// TestNoFactsInCode: what code says is no one's statement. An identifier
// written capitalized only in code is no name, and a later turn whose new
// value for the subject is written only in code supersedes nothing, while
// the same words as prose do.
func TestNoFactsInCode(t *testing.T) {
	f := newFacts()
	f.add([]Turn{
		{Pos: 1, Text: "I added a column:\n```\nuser_id = Column(Integer, ForeignKey('users.id'))\n```"},
		{Pos: 2, Text: "The model uses `Base = declarative_base()` and works."},
		{Pos: 3, Text: "Omar moved to Lisbon. Omar has a cat."},
	})
	for word, want := range map[string]bool{"foreignkey": false, "column": false, "base": false, "omar": true, "lisbon": true} {
		if f.entities[word] != want {
			t.Errorf("entity %q = %v, want %v", word, f.entities[word], want)
		}
	}

	texts := band()
	tests := []struct {
		name, update string
		stale        bool
	}{
		{"prose", "Omar's instrument went from the banjo to the harp last month.", true},
		{"fenced", "Omar's instrument, as the roster has it:\n```\nOmar: banjo -> harp\n```", false},
		{"inline", "Omar's instrument went from `banjo` to `harp` in the roster file.", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := append([]string(nil), texts...)
			ts[40] = tc.update
			x := NewIndex(chatTurns(ts...)...)
			q := Query{Ask: "Which instrument does Omar play?"}
			if got := x.Explain(q, []int{4 + 3})[0] == MissStale; got != tc.stale {
				t.Errorf("the old statement stale: %v, want %v (hits %q)", got, tc.stale, hitTexts(x.Search(q)))
			}
		})
	}
}
