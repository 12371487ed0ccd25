package memory

import (
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
)

func supersededTexts(f *facts, turns []Turn) []string {
	f.finish()
	var out []string
	for _, t := range turns {
		if f.superseded(t.Pos, f.history, nil, nil, nil) {
			out = append(out, t.Text)
		}
	}
	sort.Strings(out)
	return out
}

func TestSupersession(t *testing.T) {
	turns := team(30)
	f := newFacts()
	f.add(turns)
	got := supersededTexts(f, turns)
	want := []string{
		"Hugo has a tortoise at home.",
		"Mei has a husky at home.",
		"Omar moved to Lisbon last spring.",
		"Priya moved to Osaka last spring.",
		"Ravi moved to Quito last spring.",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("superseded:\n%q\nwant:\n%q", got, want)
	}
}

// TestFactsOrderFree: the analysis is a function of the set of turns, not
// of how they arrive.
func TestFactsOrderFree(t *testing.T) {
	turns := team(40)
	whole := newFacts()
	whole.add(turns)
	want := strings.Join(supersededTexts(whole, turns), "|")
	for seed := int64(1); seed <= 5; seed++ {
		shuffled := append([]Turn(nil), turns...)
		rand.New(rand.NewSource(seed)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		f := newFacts()
		for i := 0; i < len(shuffled); i += 7 {
			f.add(shuffled[i:min(i+7, len(shuffled))])
			f.finish()
		}
		if got := strings.Join(supersededTexts(f, turns), "|"); got != want {
			t.Fatalf("seed %d: batches in another order give %q, want %q", seed, got, want)
		}
	}
}

func TestWindowSupersedes(t *testing.T) {
	turns := team(10)
	omarMoves := len(turns) - 6
	f := newFacts()
	f.add(append(append([]Turn(nil), turns[:omarMoves]...), turns[omarMoves+1:]...)) // Omar's update is not a candidate...
	f.finish()
	later := windowFacts(f, turns[omarMoves:omarMoves+1]) // ...it is in the window
	omar := turns[0]
	if !f.superseded(omar.Pos, nil, later, nil, nil) {
		t.Fatalf("%q not superseded by a later statement in the window", omar.Text)
	}
	if f.superseded(omar.Pos, nil, nil, nil, nil) {
		t.Fatalf("%q superseded with nothing later", omar.Text)
	}
}

func TestEntities(t *testing.T) {
	f := newFacts()
	f.add([]Turn{
		{Pos: 1, Text: "Update on Nora: the family settled in Tbilisi."},
		{Pos: 2, Text: "Update on Zed: the team is fine."},
		{Pos: 3, Text: "Omar moved to Lisbon. Omar has a cat. The update is done."},
		{Pos: 4, Text: "Traffic was terrible this morning."},
	})
	for word, want := range map[string]bool{"nora": true, "tbilisi": true, "omar": true, "lisbon": true, "zed": true,
		"update": false, "traffic": false, "the": false} {
		if f.entities[word] != want {
			t.Errorf("entity %q = %v, want %v", word, f.entities[word], want)
		}
	}
}

func TestAskSubjects(t *testing.T) {
	f := newFacts()
	f.add(team(5))
	tests := []struct{ ask, want string }{
		{"Which companion would greet me at Omar's place?", "omar"},
		{"where is omar now", "omar"},
		{"Is Lena or Hugo in Bergen?", "lena hugo bergen"},
		{"Where do I live now?", "@user"},
		{"Write a haiku.", ""},
	}
	for _, tc := range tests {
		if got := strings.Join(f.askSubjects(tc.ask, ""), " "); got != tc.want {
			t.Errorf("askSubjects(%q) = %q, want %q", tc.ask, got, tc.want)
		}
	}
}

func TestTextSplitting(t *testing.T) {
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"terms", terms("Omar's on-call Café, 3pm!"), []string{"omar", "s", "on", "call", "café", "3pm"}},
		{"query terms", queryTerms("Where is Omar's dog? Omar!"), []string{"omar", "dog"}},
		{"sentences", sentences("Hi there. Omar moved to Oslo! Ok?\nNext"), []string{"Hi there.", "Omar moved to Oslo!", "Ok?", "Next"}},
		{"clauses", clauses("By the way, Omar: yes; no"), []string{"By the way,", "Omar:", "yes;", "no"}},
	}
	for _, tc := range tests {
		if strings.Join(tc.got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	var ws []string
	for _, w := range words("Omar's the on-call lead, a husky") {
		ws = append(ws, w.text)
	}
	if strings.Join(ws, " ") != "Omar on-call lead husky" {
		t.Errorf("words = %q", ws)
	}
}

// TestChangeInOneSentence: an update that names the old and the new value
// in one sentence ("swapped X for Y") repeats no frame, yet replaces the
// subject's old value; a sentence that names two values but not the
// subject's current one, or a speaker talking of themselves, changes
// nothing. Read from memory or from the window alike.
func TestChangeInOneSentence(t *testing.T) {
	turns := team(10)
	next := turns[len(turns)-1].Pos + 1
	extra := []Turn{
		{Pos: next, Role: "user", Text: "Lena walked the cat and the dog yesterday."},
		{Pos: next + 1, Role: "assistant", Text: "Nice."},
	}
	f := newFacts()
	f.add(append(append([]Turn(nil), turns...), extra...))
	for _, s := range supersededTexts(f, turns) {
		if strings.HasPrefix(s, "Lena") {
			t.Fatalf("a sentence naming two other values replaced %q", s)
		}
	}
	update := Turn{Pos: next + 2, Role: "user", Text: "Lena has swapped the parrot for a beagle."}
	f.add([]Turn{update})
	got := supersededTexts(f, turns)
	if !slices.Contains(got, "Lena has a parrot at home.") {
		t.Fatalf("the swap did not replace Lena's parrot: %q", got)
	}
	if slices.Contains(got, "Lena moved to Bergen last spring.") {
		t.Fatalf("the swap replaced another attribute: %q", got)
	}

	// The same update in the window supersedes the held statement.
	g := newFacts()
	g.add(turns)
	g.finish()
	window := windowFacts(g, []Turn{update})
	parrot := slices.IndexFunc(turns, func(t Turn) bool { return t.Text == "Lena has a parrot at home." })
	if parrot < 0 || !g.superseded(turns[parrot].Pos, nil, window, nil, nil) {
		t.Fatal("the swap in the window did not replace Lena's parrot")
	}
	// A speaker naming two of their things is no change.
	if fs := g.turnFacts("user", "I swapped the parrot for a beagle."); len(fs) != 0 {
		t.Fatalf("a first-person sentence read as facts %v", fs)
	}
}

// TestChangeOverFrame: change sentences that recur form a frame of their
// own, which reads each as restating the old value ("S no longer bothers
// with the _ but with a beagle" gives the cat); the change reading wins.
func TestChangeOverFrame(t *testing.T) {
	turns := team(10)
	next := turns[len(turns)-1].Pos + 1
	turns = append(turns,
		Turn{Pos: next, Role: "user", Text: "Omar no longer bothers with the cat but with a beagle."},
		Turn{Pos: next + 1, Role: "user", Text: "Lena no longer bothers with the parrot but with a beagle."},
	)
	f := newFacts()
	f.add(turns)
	got := supersededTexts(f, turns)
	for _, want := range []string{"Omar has a cat at home.", "Lena has a parrot at home."} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not replaced: superseded %q", want, got)
		}
	}
}

// TestChangeToUnnamedValue: a change whose new value the conversation
// states nowhere else ("gave up the parrot; it's a ferret now") still
// replaces the old value when the sentence says that the old one stopped
// holding; a sentence that names the subject and its value without such a
// word ("Lena loves the parrot") is no change.
func TestChangeToUnnamedValue(t *testing.T) {
	parrot := "Lena has a parrot at home."
	for _, tc := range []struct {
		text    string
		changed bool
	}{
		{"Lena gave up the parrot; it's a ferret these days.", true},
		{"Lena doesn't keep the parrot any more, she got a ferret.", true},
		{"Lena keeps a ferret rather than the parrot.", true},
		{"Lena traded the parrot for a ferret.", true},
		{"Lena loves the parrot and a ferret.", false},
		{"Lena brought the parrot to the vet.", false},
	} {
		turns := team(10)
		next := turns[len(turns)-1].Pos + 1
		turns = append(turns, Turn{Pos: next, Role: "user", Text: tc.text})
		f := newFacts()
		f.add(turns)
		got := supersededTexts(f, turns)
		if slices.Contains(got, parrot) != tc.changed {
			t.Errorf("after %q: %q superseded = %v, want %v", tc.text, parrot, !tc.changed, tc.changed)
		}
		if slices.Contains(got, "Lena moved to Bergen last spring.") {
			t.Errorf("after %q: another attribute replaced: %q", tc.text, got)
		}
		// Read from the window, the same sentence decides alike.
		g := newFacts()
		g.add(turns[:len(turns)-1])
		g.finish()
		at := slices.IndexFunc(turns, func(t Turn) bool { return t.Text == parrot })
		if g.superseded(turns[at].Pos, nil, windowFacts(g, turns[len(turns)-1:]), nil, nil) != tc.changed {
			t.Errorf("%q in the window: superseded = %v, want %v", tc.text, !tc.changed, tc.changed)
		}
	}
}

// TestSupersededForTheAsk: a turn with facts about two people is stale for
// an ask about the one whose fact was replaced, and current for an ask
// about the other or about no one in particular.
func TestSupersededForTheAsk(t *testing.T) {
	turns := team(10)
	both := Turn{Pos: turns[0].Pos - 1, Role: "user", Text: "Omar moved to Lisbon last spring. Also, Lena has a parrot at home."}
	f := newFacts()
	f.add(append(turns, both))
	f.finish()
	if len(f.byTurn[both.Pos]) != 2 {
		t.Fatalf("facts of %q: %v, want two", both.Text, f.byTurn[both.Pos])
	}
	for _, tc := range []struct {
		subjects []string
		want     bool
	}{
		{[]string{"omar"}, true},  // Omar relocated again, to Quito
		{[]string{"lena"}, false}, // Lena's parrot is current
		{[]string{"omar", "lena"}, false},
		{nil, false},
	} {
		if got := f.superseded(both.Pos, f.history, nil, nil, tc.subjects); got != tc.want {
			t.Errorf("subjects %q: superseded = %v, want %v", tc.subjects, got, tc.want)
		}
	}
}

// TestChangeMarked: the words that say a value gave way to another, by
// class, and sentences without one.
func TestChangeMarked(t *testing.T) {
	for sentence, want := range map[string]bool{
		"Beatriz has gone over to climbing.":                   true,
		"Kwame went over to Greek last month.":                 true,
		"Please fix the member list: Kwame, a mushroom guide.": true,
		"Correction: Omar plays the harp.":                     true,
		"Omar no longer plays the banjo.":                      true,
		"Omar switched to the harp.":                           true,
		"Omar went over the notes again.":                      false, // "over" without "to"
		"Omar plays the harp.":                                 false,
		"Omar went to the harp recital.":                       false,
	} {
		if got := changeMarked(words(sentence)); got != want {
			t.Errorf("changeMarked(%q) = %v, want %v", sentence, got, want)
		}
	}
}

// windowFacts is the facts a search reads of a window (readWindow).
func windowFacts(f *facts, window []Turn) map[string][]factAt {
	_, _, later := f.readWindow(window)
	return later
}
