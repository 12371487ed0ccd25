package memory

import (
	"fmt"
	"strings"
	"testing"
)

// chatTurns alternates user and assistant texts from position 3.
func chatTurns(texts ...string) []Turn {
	out := make([]Turn, len(texts))
	for i, t := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		out[i] = Turn{Pos: i + 3, Role: role, Text: t}
	}
	return out
}

func hitSet(hits []Hit) map[string]bool {
	out := map[string]bool{}
	for _, h := range hits {
		out[h.Text] = true
	}
	return out
}

// TestRelevance: the packet's size follows the ask: a pointed question gets
// its match and the match's neighbours (up to neighbourReach away), an ask that matches nothing gets
// nothing, one whose matches are scattered gets all of them, and stemming
// matches other forms of a word.
func TestRelevance(t *testing.T) {
	var texts []string
	for i := 0; i < 30; i++ {
		texts = append(texts, fmt.Sprintf("Routine check %d passed.", i), "Okay.")
	}
	texts[10] = "What did you bring back from the market?"
	texts[11] = "A hand-carved wooden flute, my favourite find."
	texts[20] = "We hiked the canyon trail on Sunday."
	texts[30] = "The canyon was windy but beautiful."
	texts[40] = "I want to hike the canyon again in spring."
	x := NewIndex(chatTurns(texts...)...)

	flute := x.Search(Query{Ask: "Tell me about the flute you found."})
	got := hitSet(flute)
	if !got[texts[11]] || !got[texts[10]] {
		t.Fatalf("flute: want the match and the question before it, got %q", hitTexts(flute))
	}
	// The match and its neighbours up to two away on each side, no more.
	if len(flute) > 1+2*neighbourReach {
		t.Fatalf("flute: %d hits for a pointed question: %q", len(flute), hitTexts(flute))
	}
	if hits := x.Search(Query{Ask: "Write a limerick about teapots."}); len(hits) != 0 {
		t.Fatalf("an ask nothing matches got %q", hitTexts(hits))
	}
	// "hiking" matches "hiked" and "hike"; "canyon" all three.
	canyon := hitSet(x.Search(Query{Ask: "When did we go hiking in the canyon?"}))
	for _, i := range []int{20, 30, 40} {
		if !canyon[texts[i]] {
			t.Errorf("scattered matches: missing %q", texts[i])
		}
	}
}

// TestContinuingAsk: an ask the last exchange already matches as well as
// the memory could continues the conversation: no packet.
func TestContinuingAsk(t *testing.T) {
	x := NewIndex(chatTurns("The boiler pressure dropped again.", "Noted.", "Routine backup done.", "Okay.")...)
	ask := "Why does the boiler pressure keep dropping?"
	window := chatTurns("", "")
	window[0] = Turn{Pos: 10, Role: "user", Text: "The boiler pressure dropped badly."}
	window[1] = Turn{Pos: 11, Role: "assistant", Text: "Sorry to hear it."}
	window = append(window, Turn{Pos: 12, Role: "user", Text: ask})
	if hits := x.Search(Query{Ask: ask, Window: window}); len(hits) != 0 {
		t.Fatalf("a continuing ask got %q", hitTexts(hits))
	}
	window[0].Text = "Let's plan the team lunch."
	if hits := x.Search(Query{Ask: ask, Window: window}); !hitSet(hits)["The boiler pressure dropped again."] {
		t.Fatalf("an ask about the past got %q", hitTexts(hits))
	}
}

// TestSpeakerNames: the parties' names are learned from how each addresses
// the other, match the turns that party said, and a vocative is not read as
// the subject of a statement.
func TestSpeakerNames(t *testing.T) {
	x := NewIndex(chatTurns(
		"I started pottery classes last week.", "That's lovely, Nadia! What are you making?",
		"Mostly bowls for now.", "Thanks, Nadia, I'd love one.",
		"My brother took up pottery too.", "Hey Nadia! How is your brother doing?",
		"He is fine.", "Routine note.",
	)...)
	x.facts.finish()
	if role := x.facts.speakerOf("nadia"); role != "user" {
		t.Fatalf("speakerOf(nadia) = %q, want user", role)
	}
	if got := x.facts.bySubject["nadia"]; len(got) != 0 {
		t.Fatalf("vocatives read as statements about Nadia: %v", got)
	}
	hits := x.Search(Query{Ask: "What classes did Nadia start?"})
	if len(hits) == 0 || hits[0].Text != "I started pottery classes last week." {
		t.Fatalf("Nadia's own turn should rank first: %q", hitTexts(hits))
	}
	if strings.Contains(strings.Join(hitTexts(hits), "\n"), "Hey Nadia") {
		t.Fatalf("a greeting came back for the name alone: %q", hitTexts(hits))
	}
}

// TestChanceMatch: an ask whose only match is a word more common than the
// conversation's average word gets nothing, although that word is the
// best match there is (a gate relative to the best hit would pass it);
// the same ask with a word said once gets that turn.
func TestChanceMatch(t *testing.T) {
	vocab := strings.Fields("river cloud paper lamp green amber north quiet rapid")
	var texts []string
	for i := 0; i < 60; i++ {
		if i%3 == 0 {
			texts = append(texts, "stone") // in 20 of 60 turns
		} else {
			texts = append(texts, vocab[i%9]) // each in about 4
		}
	}
	texts[25] = "lantern"
	x := NewIndex(chatTurns(texts...)...)
	if hits := x.Search(Query{Ask: "Tell me about the stone teapot."}); len(hits) != 0 {
		t.Fatalf("an ask matching only a common word got %d hits: %q", len(hits), hitTexts(hits))
	}
	hits := x.Search(Query{Ask: "Tell me about the stone lantern."})
	if len(hits) == 0 || hits[0].Text != "lantern" {
		t.Fatalf("the turn with the rare word should lead: %q", hitTexts(hits))
	}
}

// TestAskedSubjectOverOthers: statements about other people that share the
// ask's words do not set the scale that the asked person's own statements,
// phrased otherwise, must reach.
func TestAskedSubjectOverOthers(t *testing.T) {
	var texts []string
	say := func(s string) { texts = append(texts, s, "Noted.") }
	langs := []string{"Greek", "Korean", "Finnish", "Swahili", "Turkish"}
	people := []string{"Omar", "Priya", "Hugo", "Mei", "Ravi"}
	for i, p := range people {
		say(fmt.Sprintf("%s takes evening classes in %s.", p, langs[i]))
		say(fmt.Sprintf("%s is learning %s with a tutor.", people[(i+2)%5], langs[i]))
	}
	for i := 0; i < 20; i++ {
		say(fmt.Sprintf("Laila and %s share ticket %d.", people[i%5], i))
	}
	say("Laila is learning Portuguese with a tutor.")
	say("Laila booked the back room.")
	x := NewIndex(chatTurns(texts...)...)
	hits := x.Search(Query{Ask: "What are Laila's evening classes about?"})
	if !hitSet(hits)["Laila is learning Portuguese with a tutor."] {
		t.Fatalf("Laila's own statement is missing: %q", hitTexts(hits))
	}
}

// TestWeakFill: a question's fill room left after the turns that match it
// beyond chance takes the turns that share only a common word with it,
// ranked after the real match and its neighbours (a weak match's own
// neighbours are as weak), as far as FillTokens goes; with
// no fill room, or for a statement, they stay out.
func TestWeakFill(t *testing.T) {
	vocab := strings.Fields("river cloud paper lamp green amber north quiet rapid")
	var texts []string
	for i := 0; i < 60; i++ {
		if i%3 == 0 {
			texts = append(texts, fmt.Sprintf("stone %d", i)) // in 20 of 60 turns
		} else {
			texts = append(texts, vocab[i%9])
		}
	}
	texts[25] = "lantern"
	x := NewIndex(chatTurns(texts...)...)
	// Turns that hold "stone" and are no neighbour of the lantern's.
	far := func(hits []Hit) (n, first int) {
		first = -1
		for i, h := range hits {
			if strings.HasPrefix(h.Text, "stone") && (h.Pos < 25+3-2 || h.Pos > 25+3+2) {
				if first < 0 {
					first = i
				}
				n++
			}
		}
		return n, first
	}
	const ask = "Tell me about the stone lantern."
	if n, _ := far(x.Search(Query{Ask: ask})); n != 0 {
		t.Errorf("no fill room: %d weak matches", n)
	}
	if n, _ := far(x.Search(Query{Ask: ask, FillTokens: 1000, Statement: true})); n != 0 {
		t.Errorf("a statement got %d weak matches", n)
	}
	hits := x.Search(Query{Ask: ask, FillTokens: 1000})
	n, first := far(hits)
	if n < 15 {
		t.Errorf("fill room for all: %d of the 18 far weak matches, hits %q", n, hitTexts(hits))
	}
	if len(hits) == 0 || hits[0].Text != "lantern" {
		t.Fatalf("the real match should lead: %q", hitTexts(hits))
	}
	for i, h := range hits {
		if d := h.Pos - (25 + 3); d >= -1 && d <= 1 && i > first {
			t.Errorf("%q, the match or its neighbour, ranks after the first weak match", h.Text)
		}
	}
	if n, _ := far(x.Search(Query{Ask: ask, FillTokens: 3})); n > 3 {
		t.Errorf("fill room 3: %d weak matches", n)
	}
}

// TestBurstNeighbours: a speaker's turn is the run of messages they send
// before the other answers. A hit's neighbours are the rest of its run and
// the turns up to two speaker turns away, however many messages each
// holds: the run and the reply at half the hit's score, the turn after at
// a quarter, and nothing three turns away. Past the next message they are
// a question's fill.
func TestBurstNeighbours(t *testing.T) {
	var turns []Turn
	say := func(role, text string) { turns = append(turns, Turn{Pos: len(turns) + 3, Role: role, Text: text}) }
	for i := 0; i < 10; i++ {
		say("user", fmt.Sprintf("Routine check %d passed.", i))
		say("assistant", fmt.Sprintf("Logged entry %d.", i))
	}
	burst := []string{"We adopted a puppy last week.", "She is a golden retriever.", "Her name is Biscuit.", "She sleeps all day."}
	for _, b := range burst {
		say("user", b)
	}
	say("assistant", "Congratulations, that sounds lovely.")
	say("user", "Thanks, we are thrilled.")
	say("assistant", "Send photos sometime.")
	for i := 10; i < 20; i++ {
		say("user", fmt.Sprintf("Routine check %d passed.", i))
		say("assistant", fmt.Sprintf("Logged entry %d.", i))
	}
	x := NewIndex(turns...)
	ask := "What kind of puppy did you adopt?"

	hits := x.Search(Query{Ask: ask, FillTokens: 1000})
	score := map[string]float64{}
	for _, h := range hits {
		score[h.Text] = h.Score
	}
	best, ok := score[burst[0]]
	if !ok {
		t.Fatalf("the match is not a hit: %q", hitTexts(hits))
	}
	for _, want := range []struct {
		text  string
		share float64
	}{
		{burst[1], 0.5}, {burst[2], 0.5}, {burst[3], 0.5},
		{"Congratulations, that sounds lovely.", 0.5},
		{"Thanks, we are thrilled.", 0.25},
	} {
		if got, ok := score[want.text]; !ok || got != want.share*best {
			t.Errorf("%q: score %v (a hit: %v), want %v of the match's %v", want.text, got, ok, want.share, best)
		}
	}
	if _, ok := score["Send photos sometime."]; ok {
		t.Errorf("a turn three speaker turns away is a neighbour: %q", hitTexts(hits))
	}

	// Without fill room only the messages next to the match come.
	near := hitSet(x.Search(Query{Ask: ask}))
	if !near[burst[1]] || near[burst[2]] || near[burst[3]] {
		t.Errorf("no fill: want the next message of the burst and no further, got %v", near)
	}
}

// TestTheAskerIsNoWord: an ask about oneself ("did I …") does not rank the
// asker's statements by the turns that hold the role's name: in an
// assistant chat "user" is a word of its own (user tables, user roles), and
// the statements it matched nothing of stay out.
func TestTheAskerIsNoWord(t *testing.T) {
	var texts []string
	say := func(user, assistant string) { texts = append(texts, user, assistant) }
	tasks := []string{"bake sourdough bread", "learn the cello", "paint the fence", "repair the bicycle", "plant tomatoes", "sew a jacket"}
	for i, task := range tasks {
		say(fmt.Sprintf("I'm trying to %s this week.", task), fmt.Sprintf("Good luck with that, step %d first.", i))
		say(fmt.Sprintf("I'm planning to %s soon.", task), "That sounds fun.")
	}
	for i := 0; i < 10; i++ {
		say(fmt.Sprintf("How should the user table store role %d?", i), fmt.Sprintf("Give each user a role column; user role %d maps to a permission set.", i))
	}
	say("I'm trying to add user roles for admins and guests.", "Admins and guests each get a user role.")
	x := NewIndex(chatTurns(texts...)...)
	hits := x.Search(Query{Ask: "Which user roles did I want for the admins and the guests?", Asker: "user"})
	got := hitSet(hits)
	if !got["I'm trying to add user roles for admins and guests."] {
		t.Fatalf("the asker's statement about user roles is missing: %q", hitTexts(hits))
	}
	for _, task := range tasks {
		if s := fmt.Sprintf("I'm trying to %s this week.", task); got[s] {
			t.Errorf("a statement of the asker that matches nothing of the ask is a hit: %q", s)
		}
	}
}

// TestALongTurnRanksByItsBestPassage: a long answer that says the ask's
// words here and there over many paragraphs ranks by its best passage, not
// by the whole turn's counts, so the short turn that says more of them
// together, the answer, comes first.
func TestALongTurnRanksByItsBestPassage(t *testing.T) {
	var long strings.Builder
	for i, w := range []string{"database", "budget", "tracker", "chose", "database", "budget", "tracker", "chose"} {
		fmt.Fprintf(&long, "Paragraph %d. The %s matters here, as said before; consider the indexes, the schema, the migrations and the backups before anything else is decided.\n\n", i, w)
		fmt.Fprintf(&long, "More about the %s: keep it simple, measure it, and write down why, so that the next person can follow the reasoning later on.\n\n", w)
	}
	texts := []string{"Can you help me plan my app?", long.String(), "For the tracker I went with PostgreSQL as the database.", "Noted."}
	// An assistant chat: answers as long as this one, so its length is
	// the turns' average and no penalty.
	filler := strings.Repeat("Routine notes on the weather, the garden, the trains and the week ahead, nothing more. ", 30)
	for i := 0; i < 20; i++ {
		texts = append(texts, fmt.Sprintf("Routine check %d passed.", i), fmt.Sprintf("%d. %s", i, filler))
	}
	x := NewIndex(chatTurns(texts...)...)
	if len(texts[1]) <= longTurn {
		t.Fatalf("the answer is %d bytes, not long", len(texts[1]))
	}
	hits := x.Search(Query{Ask: "Which database did I choose for the budget tracker?", K: 1})
	if len(hits) != 1 || hits[0].Text != texts[2] {
		t.Fatalf("want the short turn that says it first, got %q", hitTexts(hits))
	}
}
