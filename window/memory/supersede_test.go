package memory

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestUpdateByValue: a later turn about the same subject that names the
// value an earlier statement gave it supersedes that statement, however
// it is worded (no frame, no change verb, the new value said nowhere
// else, the values in two sentences); a question that names the value
// does not, nor does a turn about someone else.
func TestUpdateByValue(t *testing.T) {
	texts := band()
	old, other := 4, 12
	tests := []struct {
		name   string
		update string
		stale  bool
	}{
		{"two sentences, new value unknown", "Remember when I said Omar's instrument was the banjo? Scratch that, the harp.", true},
		{"no marker", "Omar's instrument went from the banjo to the harp last month.", true},
		{"a question states nothing", "Does Omar still have the banjo?", false},
		{"someone else", "Kenji's instrument went from the banjo to the harp last month.", false},
	}
	for _, tc := range tests {
		ts := append([]string(nil), texts...)
		ts[40] = tc.update
		x := NewIndex(chatTurns(ts...)...)
		q := Query{Ask: "Which instrument does Omar play?"}
		got := hitSet(x.Search(q))
		if got[ts[old]] == tc.stale {
			t.Errorf("%s: the old statement in the packet: %v, want %v (hits %q)", tc.name, got[ts[old]], !tc.stale, hitTexts(x.Search(q)))
		}
		if tc.stale {
			if m := x.Explain(q, []int{old + 3})[0]; m != MissStale {
				t.Errorf("%s: old statement explained as %v, want %v", tc.name, m, MissStale)
			}
		}
		// Kenji's statement is about someone else: never superseded by
		// an update about Omar.
		if kq := (Query{Ask: "Which instrument does Kenji play?"}); tc.name != "someone else" && !hitSet(x.Search(kq))[ts[other]] {
			t.Errorf("%s: Kenji's statement missing for an ask about Kenji: %q", tc.name, hitTexts(x.Search(kq)))
		}
	}
}

// band returns 60 turns in which Omar (turn 4) and Kenji (turn 12) say
// they play the banjo and Sofia the trombone, between routine turns; turn
// 40 is free for an update.
func band() []string {
	var texts []string
	for i := 0; i < 30; i++ {
		texts = append(texts, fmt.Sprintf("Routine check %d passed.", i), "Okay.")
	}
	texts[4] = "Omar plays the banjo in the evening band."
	texts[8] = "Sofia plays the trombone in the evening band."
	texts[12] = "Kenji plays the banjo in the evening band."
	texts[20] = "I had coffee with Sofia and Kenji."
	texts[24] = "Send the agenda to Omar, please."
	return texts
}

// club returns a conversation where a club's members each say once which
// instrument they play and which sport they do, each attribute in four
// phrasings, and some recommend things of both kinds to a colleague (a
// frame said of two attributes' values), between routine turns. Omar
// plays the banjo and trains for rowing.
func club() []string {
	people := []string{"Omar", "Sofia", "Kenji", "Priya", "Lena", "Ravi", "Mei", "Hugo",
		"Ana", "Ben", "Cai", "Dov", "Eli", "Fay", "Gus", "Ida"}
	instruments := []string{"banjo", "cello", "harp", "trombone", "clarinet"}
	sports := []string{"fencing", "rowing", "judo", "curling", "sailing"}
	plays := []string{"%s plays the %s in the evening band.", "For the record, %s practises %s every weekend.",
		"%s brings the %s to every rehearsal.", "%s tunes the %s before each concert."}
	does := []string{"%s trains for %s twice a week.", "%s signed up for the %s league.",
		"%s competes in %s on Sundays.", "%s coaches %s for the juniors."}
	var out []string
	say := func(s string) { out = append(out, s, "Noted.") }
	for i, p := range people {
		say(fmt.Sprintf(plays[i%4], p, instruments[i%5]))
		say(fmt.Sprintf(does[(i+1)%4], p, sports[(i+1)%5]))
		say(fmt.Sprintf("Routine check %d passed.", i))
	}
	for i, p := range people[1:9] {
		say(fmt.Sprintf("%s recommended the %s to a colleague.", p, instruments[i%5]))
		say(fmt.Sprintf("%s recommended %s to a colleague.", p, sports[i%5]))
	}
	return out
}

// TestUpdateWithoutOldValue: a later statement about the same subject and
// attribute supersedes the earlier one though it never names the old
// value, when it says the value holds now or changed (statement.current)
// and its value is one of that attribute's alone, however it is phrased:
// in no known frame, after a pronoun, with the value alone. It does not
// when it is about someone else (a relation of the subject), hedged, in a
// reported question, about another attribute, or without a sign that the
// value is the current one. A change of another attribute ("switched to
// judo") supersedes that attribute's statement, not this one.
func TestUpdateWithoutOldValue(t *testing.T) {
	const old = "Omar plays the banjo in the evening band."
	for _, tc := range []struct {
		update string
		stale  bool
	}{
		{"Small change: Omar has switched and now plays the harp instead.", true},
		{"These days it's the harp for Omar.", true},
		{"Bumped into Omar at the station. He plays the cello now, apparently.", true},
		{"Update: Omar has moved on to the clarinet.", true},
		{"I spoke to Omar yesterday: he's switched to the harp.", true},
		{"I had lunch with Omar. He has gone over to the harp.", true},
		{"Please fix the member list: Omar, the harp.", true},
		{"Omar's sister plays the harp now.", false},
		{"Omar might switch to the harp one day.", false},
		{"Omar is thinking about playing the harp now and then.", false},
		{"Omar asked whether anyone in the club now plays the harp.", false},
		{"Omar switched to judo this spring.", false},
		{"Omar mentioned the harp at lunch.", false},
	} {
		texts := append(club(), tc.update, "Okay.")
		turns := chatTurns(texts...)
		f := newFacts()
		f.add(turns)
		got := supersededTexts(f, turns)
		if slices.Contains(got, old) != tc.stale {
			t.Errorf("after %q: %q superseded = %v, want %v", tc.update, old, !tc.stale, tc.stale)
		}
		if sport := strings.Contains(tc.update, "judo"); slices.Contains(got, "Omar signed up for the rowing league.") != sport {
			t.Errorf("after %q: Omar's sport superseded = %v, want %v", tc.update, !sport, sport)
		}
		// Read from the window, the same sentence decides alike.
		g := newFacts()
		g.add(turns[:len(turns)-2])
		g.finish()
		at := slices.IndexFunc(turns, func(t Turn) bool { return t.Text == old })
		if g.superseded(turns[at].Pos, nil, windowFacts(g, turns[len(turns)-2:]), nil, nil) != tc.stale {
			t.Errorf("%q in the window: superseded = %v, want %v", tc.update, !tc.stale, tc.stale)
		}
	}
}

// TestUpdateNotByMention: a later turn that names the subject and the
// value of an earlier statement is no update of it when it names the value
// only in a frame said of several attributes' values, in a question that
// does not name the subject, or of the subject's relation: the earlier
// statement stays in the packet.
func TestUpdateNotByMention(t *testing.T) {
	const old = "Omar plays the banjo in the evening band."
	for _, tc := range []struct {
		name, later string
	}{
		{"general frame", "Omar recommended the banjo to a colleague."},
		{"question without the subject", "Does anyone know a shop for the banjo? Omar is asking for a friend."},
		{"relation", "Omar's neighbour plays the banjo, Omar says."},
	} {
		texts := append(club(), tc.later, "Okay.")
		for i := 0; i < 20; i++ {
			texts = append(texts, fmt.Sprintf("Routine note %d filed.", i), "Fine.")
		}
		x := NewIndex(chatTurns(texts...)...)
		q := Query{Ask: "Which instrument does Omar play?"}
		if !hitSet(x.Search(q))[old] {
			t.Errorf("%s: %q dropped after %q (hits %q)", tc.name, old, tc.later, hitTexts(x.Search(q)))
		}
	}
}

// An updater names a value the same way whether it is checked once (the
// runs hashed until one matches) or again (all of them kept, sorted).
func TestAnUpdaterNamesValuesAlikeOnEveryCheck(t *testing.T) {
	said := []saying{{words: "omar moved to the old town of oslo"}, {words: "did omar like it", question: true}, {words: "the harp is his now"}}
	for _, v := range []string{"oslo", "old town", "the old town of", "oslo the", "harp", "like it", "it the", "town of oslo the"} {
		// By the definition: some run of up to maxValueWords of the words
		// it asserts (a question naming the subject included) is v.
		ws, want := assertedWords(nil, said, []string{"omar"}), false
		for i := range ws {
			for j := i + 1; j <= len(ws) && j <= i+maxValueWords; j++ {
				want = want || strings.Join(ws[i:j], " ") == v
			}
		}
		u := &updater{said: said, subjects: []string{"omar"}}
		for check := 1; check <= 3; check++ {
			if got := u.names(fnvAdd(fnvOffset, v), &updaterList{}); got != want {
				t.Errorf("%q, check %d: names %v, want %v", v, check, got, want)
			}
		}
	}
}

// containsLower finds a lower-case word in a text of any case as
// strings.Contains of the lowered text does: the first letter in either
// case, overlaps, the text's end, and text that is not ASCII.
func TestContainsLowerIsContainsOfTheLoweredText(t *testing.T) {
	texts := []string{"", "a", "A", "Bora", "BORA works", "the boa and the bora", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "abBorA", "xBor",
		"Ünïcode Bora", "Éa bora", strings.Repeat("b", 300) + "Bora", strings.Repeat("B", 300) + "x", "…bora", "12345678bora", "1234567Bora"}
	subs := []string{"", "b", "bora", "bor", "ora", "a", "é", "x", "bb", "12345678"}
	for _, text := range texts {
		for _, sub := range subs {
			if got, want := containsLower(text, sub, isASCII(text)), strings.Contains(strings.ToLower(text), sub); got != want {
				t.Errorf("containsLower(%q, %q) = %v, want %v", text, sub, got, want)
			}
		}
	}
}
