package memory

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// chanceVocab is a small vocabulary of equally common words, the TTFT
// bench's built-in workload's: no word of it is evidence of any turn.
var chanceVocab = strings.Fields(`alpha beta cache slot prefix window sink token memory route
turn block key chain hash layer model batch queue shard node fleet budget packet
ledger evict keep pin step plan cost time first last river stone cloud paper lamp
green amber north south quiet rapid linen copper maple orbit pixel quartz harbor
meadow signal vector kernel thread socket cobalt velvet tundra canyon lantern`)

// randomWords returns lo to hi words drawn uniformly from chanceVocab.
func randomWords(r *rand.Rand, lo, hi int) string {
	w := make([]string, lo+r.IntN(hi-lo+1))
	for i := range w {
		w[i] = chanceVocab[r.IntN(len(chanceVocab))]
	}
	return strings.Join(w, " ") + "."
}

// TestStatementChance: a statement of words drawn at random from a small
// vocabulary of equally common words rarely gets a packet (the rule bounds
// the expected chance matches below one, it does not make them none), at
// any memory size, while served as a question the same asks get more
// chance packets the more turns there are
// (the best of n turns matches by chance more often as n grows). A
// statement that shares two rare words with a turn, and a question about
// one rare word, still get that turn at every size; one rare word alone
// is not enough for a statement (the cost of the rule).
func TestStatementChance(t *testing.T) {
	const asks = 200
	const story = "I finally repaired the hand-carved wooden flute."
	var first, last int
	for i, n := range []int{50, 200, 800, 3200} {
		r := rand.New(rand.NewPCG(uint64(n), 7))
		texts := make([]string, n)
		for j := range texts {
			texts[j] = randomWords(r, 1, 5)
		}
		texts[n/3] = story
		x := NewIndex(chatTurns(texts...)...)
		statements, questions := 0, 0
		for range asks {
			ask := randomWords(r, 1, 4)
			if hits := x.Search(Query{Ask: ask, Statement: true}); len(hits) > 0 {
				statements++
			}
			if hits := x.Search(Query{Ask: ask}); len(hits) > 0 {
				questions++
			}
		}
		t.Logf("%d turns: %d of %d random statements got a packet, %d served as questions", n, statements, asks, questions)
		if statements > asks/10 {
			t.Errorf("%d turns: %d of %d random-word statements got a packet", n, statements, asks)
		}
		if i == 0 {
			first = questions
		}
		last = questions
		if hits := x.Search(Query{Ask: "The wooden flute sounds lovely again.", Statement: true}); len(hits) == 0 || hits[0].Text != story {
			t.Errorf("%d turns: a statement sharing two rare words lost its turn: %q", n, hitTexts(hits))
		}
		if hits := x.Search(Query{Ask: "What did I repair?"}); len(hits) == 0 || hits[0].Text != story {
			t.Errorf("%d turns: a question about a rare word lost its turn: %q", n, hitTexts(hits))
		}
		if hits := x.Search(Query{Ask: "Repaired, at last.", Statement: true}); len(hits) != 0 {
			t.Errorf("%d turns: a statement matching one word said once got %q", n, hitTexts(hits))
		}
	}
	if last <= first {
		t.Errorf("served as questions, random asks got %d packets at the largest size and %d at the smallest: the chance the best of n turns matches should grow with n", last, first)
	}
}

// TestCommonNameQuestion: a question naming a person the conversation
// mentions often, with a verb said often too, still gets the statement
// that answers it among thousands of turns.
func TestCommonNameQuestion(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	texts := make([]string, 3000)
	for i := range texts {
		switch {
		case i%20 == 0:
			texts[i] = "Beatriz booked the back room again."
		case i%33 == 0:
			texts[i] = "We play cards on Friday evenings."
		default:
			texts[i] = randomWords(r, 2, 6)
		}
	}
	const answer = "Beatriz plays the cello in the evening band."
	texts[1001] = answer
	x := NewIndex(chatTurns(texts...)...)
	hits := x.Search(Query{Ask: "What instrument does Beatriz play?"})
	if !hitSet(hits)[answer] {
		t.Fatalf("the answer is missing: %q", hitTexts(hits))
	}
}
