package recall

import (
	"fmt"
	"math/rand"
	"strings"
)

// Generate returns a synthetic conversation of its own kind, to check that
// what works on synth-10k is not tied to that generator's names, values or
// phrasings: a club's members and their habits (instrument, sport, car,
// language class, reading), each stated once among routine turns, some
// changed later in words of several kinds ("has swapped", "correction:",
// "no longer … but"). Every question paraphrases its attribute and names
// the person; its evidence is the latest statement, its stale evidence the
// one replaced. The same seed gives the same conversation.
//
// It was written to check the memory policy, never to tune it: no default
// of the window was chosen by looking at its output.
func Generate(seed int64, turns int) Conversation { return GenerateFamily(FamilyTeam, seed, turns) }

// Families of generated conversations: the same club, plan and questions,
// updated in different words.
const (
	// FamilyTeam updates in the team's own phrasings (genUpdates).
	FamilyTeam = "team"
	// FamilyIndependent updates in phrasings written apart from the
	// window's rules (independentUpdates), which name the attribute by a
	// noun and its owner ("Tomasz's instrument") rather than by a verb.
	FamilyIndependent = "independent"
	// FamilyUnrestated updates in phrasings that never name the value
	// they replace (unrestatedUpdates), and adds distractors among the
	// routine turns: a member named with a value that is not theirs.
	FamilyUnrestated = "unrestated"
)

// Families returns the generator's families.
func Families() []string { return []string{FamilyTeam, FamilyIndependent, FamilyUnrestated} }

// GenerateFamily is Generate with the update phrasings of family (an
// unknown family is FamilyTeam's).
func GenerateFamily(family string, seed int64, turns int) Conversation {
	r := rand.New(rand.NewSource(seed))
	people := r.Perm(len(genPeople))
	members := make([]string, 0, 24)
	for _, i := range people[:24] {
		members = append(members, genPeople[i])
	}
	c := Conversation{ID: fmt.Sprintf("generated-%d", seed), SpeakerA: "Robin", SpeakerB: "Helper"}
	if family == FamilyIndependent || family == FamilyUnrestated {
		c.ID = fmt.Sprintf("generated-%s-%d", family, seed)
	}
	session := 1
	say := func(speaker, text string) int {
		if len(c.Turns) > 0 && len(c.Turns)%80 == 0 {
			session++
		}
		c.Turns = append(c.Turns, Turn{Speaker: speaker, DiaID: fmt.Sprintf("D%d:%d", session, len(c.Turns)%80+1), Text: text})
		return len(c.Turns) - 1
	}
	type state struct {
		value string
		at    int
		stale []int
	}
	facts := map[[2]int]*state{} // (member, attribute) → latest statement
	var keys [][2]int
	for m := range members {
		for a := range genAttrs {
			keys = append(keys, [2]int{m, a})
		}
	}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:60]
	// Plan: statements spread over the first two thirds, updates of a
	// third of them later on; the rest is routine.
	type event struct {
		key    [2]int
		update bool
	}
	plan := map[int]event{}
	pairs := turns / 2
	for i, k := range keys {
		plan[r.Intn(pairs*2/3)] = event{key: k}
		if i%3 == 0 {
			plan[pairs*2/3+r.Intn(pairs/3)] = event{key: k, update: true}
		}
	}
	for p := 0; p < pairs; p++ {
		ev, ok := plan[p]
		st := facts[ev.key]
		switch {
		case ok && !ev.update && st == nil:
			a := genAttrs[ev.key[1]]
			v := a.values[r.Intn(len(a.values))]
			name := members[ev.key[0]]
			at := say(c.SpeakerA, fmt.Sprintf(a.states[r.Intn(len(a.states))], name, v))
			facts[ev.key] = &state{value: v, at: at}
		case ok && ev.update && st != nil:
			a := genAttrs[ev.key[1]]
			v := st.value
			for v == st.value {
				v = a.values[r.Intn(len(a.values))]
			}
			name := members[ev.key[0]]
			at := say(c.SpeakerA, update(family, r, name, a, fmt.Sprintf(a.bare, v), fmt.Sprintf(a.bare, st.value)))
			st.stale = append(st.stale, st.at)
			st.value, st.at = v, at
		case family == FamilyUnrestated && r.Intn(6) == 0:
			say(c.SpeakerA, unrestatedDistractor(r, members[r.Intn(len(members))]))
		default:
			name := members[r.Intn(len(members))]
			line := genRoutine[r.Intn(len(genRoutine))]
			if strings.Contains(line, "%s") {
				line = fmt.Sprintf(line, name)
			}
			say(c.SpeakerA, line)
		}
		say(c.SpeakerB, genReplies[r.Intn(len(genReplies))])
	}
	for _, k := range keys {
		st := facts[k]
		if st == nil {
			continue
		}
		a := genAttrs[k[1]]
		q := fmt.Sprintf(a.questions[r.Intn(len(a.questions))], members[k[0]])
		c.Questions = append(c.Questions, Question{Question: q, Category: 4, Evidence: []int{st.at}, Stale: st.stale})
	}
	return c
}

// update phrases the change of name's attribute a from old to new in
// family's words.
func update(family string, r *rand.Rand, name string, a genAttr, new, old string) string {
	if family == FamilyUnrestated {
		return unrestated(unrestatedUpdates[r.Intn(len(unrestatedUpdates))], name, a, new)
	}
	if family != FamilyIndependent {
		return fmt.Sprintf(genUpdates[r.Intn(len(genUpdates))], name, new, old)
	}
	return strings.NewReplacer("{subject}", name+"'s "+a.noun, "{old}", old, "{new}", new).
		Replace(independentUpdates[r.Intn(len(independentUpdates))])
}

// genAttr is one habit a member has: how it is stated, how its value reads
// inside an update, and how a question asks for it.
type genAttr struct {
	states    []string // %[1]s name, %[2]s value
	noun      string   // the attribute as a noun ("instrument")
	bare      string   // the value as an update says it
	values    []string
	questions []string // %s name
}

var genAttrs = []genAttr{
	{
		states:    []string{"%s plays the %s in the evening band.", "For the record, %s practises %s every weekend."},
		noun:      "instrument",
		bare:      "the %s",
		values:    []string{"cello", "trombone", "banjo", "clarinet", "harp", "accordion"},
		questions: []string{"Which instrument does %s play?", "What does %s practise musically?"},
	},
	{
		states:    []string{"%s trains for %s twice a week.", "%s signed up for the %s league."},
		noun:      "sport",
		bare:      "%s",
		values:    []string{"fencing", "rowing", "handball", "climbing", "judo", "curling"},
		questions: []string{"What sport is %s doing at the moment?", "Which league is %s in?"},
	},
	{
		states:    []string{"%s drives a %s to the meetings.", "%s picked up a %s from the dealer."},
		noun:      "ride",
		bare:      "a %s",
		values:    []string{"red hatchback", "camper van", "pickup truck", "electric scooter", "station wagon", "vintage roadster"},
		questions: []string{"What vehicle does %s get around in?", "How does %s travel to meetings?"},
	},
	{
		states:    []string{"%s takes evening classes in %s.", "%s is learning %s with a tutor."},
		noun:      "language class",
		bare:      "%s",
		values:    []string{"Portuguese", "Korean", "Swahili", "Finnish", "Greek", "Turkish"},
		questions: []string{"Which language is %s studying?", "What are %s's evening classes about?"},
	},
	{
		states:    []string{"%s keeps reading %s on the train.", "%s borrowed %s from the library."},
		noun:      "book",
		bare:      "%s",
		values:    []string{"a sailing memoir", "a chess manual", "a mushroom guide", "a space opera", "a baking almanac", "a bridge atlas"},
		questions: []string{"Which book has %s got with them lately?", "What is %s reading?"},
	},
}

// genUpdates replace a value: %[1]s name, %[2]s new value, %[3]s old value.
var genUpdates = []string{
	"Quick correction: %[1]s now has %[2]s, not %[3]s.",
	"%[1]s has swapped %[3]s for %[2]s.",
	"Heads-up, %[1]s no longer bothers with %[3]s but with %[2]s.",
	"Since last month %[1]s is all about %[2]s instead of %[3]s.",
	// Added later, before supersession read changes whose new value the
	// conversation never states elsewhere, and kept as they were written.
	"%[1]s gave up %[3]s; it's %[2]s these days.",
	"%[1]s traded %[3]s for %[2]s over the summer.",
	"%[1]s moved on from %[3]s to %[2]s.",
	"These days %[1]s prefers %[2]s rather than %[3]s.",
	"%[1]s is done with %[3]s and has taken up %[2]s.",
}

var genRoutine = []string{
	"%s will bring the snacks on Thursday.",
	"Can you send the agenda to %s?",
	"%s booked the back room again.",
	"I had coffee with %s this morning.",
	"%s says the printer is jammed.",
	"Remind me to call %s after lunch.",
	"The newsletter draft is ready for review.",
	"Our next meetup moved to the community hall.",
	"Could you tidy up the member list?",
}

var genReplies = []string{
	"Sure thing.", "Will do.", "Got it, thanks.", "Okay, noted for later.", "All right.", "I'll take care of it.",
}

var genPeople = []string{
	"Tomasz", "Ingrid", "Kwame", "Sofia", "Rahul", "Yuki", "Beatriz", "Olu", "Nadia", "Emeka",
	"Linnea", "Mateus", "Chiara", "Dmitri", "Amara", "Jonas", "Farah", "Leif", "Priyanka", "Soren",
	"Thandiwe", "Ignacio", "Marisol", "Kenji", "Astrid", "Bongani", "Viktor", "Esperanza", "Henrik", "Laila",
}
