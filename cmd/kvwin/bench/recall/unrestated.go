package recall

import (
	"math/rand"
	"strings"
)

// unrestatedUpdates are the update phrasings of the unrestated family
// (GenerateFamily with FamilyUnrestated): an update that never names the
// value it replaces, as people write in a messaging app ("Small change:
// Ines has switched and now drinks mint tea instead."). Placeholders:
//
//	{name}   the member
//	{pron}   he or she, {Pron} capitalised, {poss} his or her
//	{new}    the new value as an update says it ("the trombone")
//	{does}   the attribute's verb with the new value ("plays the trombone")
//	{doing}  the same as a gerund ("playing the trombone")
//	{noun}   the attribute as a noun ("instrument")
//
// Some name the attribute by its verb, some by its noun, some by neither
// (the value alone says what changed); some put a pronoun after a name in
// the sentence before.
//
// Provenance: written for issue 44 (item 3) from the brief alone, before
// the engineer read the supersession code (window/memory/supersede.go,
// facts.go, cluster.go), and kept as written: no rule of the window was
// tuned on this family, which is its held-out check.
var unrestatedUpdates = []string{
	"Small change: {name} has switched and now {does} instead.",
	"Update: {name} {does} now.",
	"{name} switched to {new}.",
	"{name} has moved on to {new}.",
	"These days it's {new} for {name}.",
	"{name} has taken up {new} instead.",
	"{name} no longer bothers with the same {noun} as before; it's {new} now.",
	"Bumped into {name} at the station. {Pron} {does} now, apparently.",
	"I spoke to {name} yesterday: {pron}'s switched to {new}.",
	"Heads up, {name}'s {noun} is {new} now.",
	"{name} now prefers {new}.",
	"From now on {name} {does}.",
	"{name} changed {poss} {noun}, it's {new} from here on.",
	"Turns out {name} gave that up; {pron} {does} these days.",
	"Just so you know, {name} has started {doing} instead.",
	"Latest from {name}: {new}, as of this month.",
	"{name} is all about {new} lately.",
	"Note that {name} has gone over to {new}.",
	"Newsflash: {name} {does} these days, not what I told you before.",
	"Had a chat with {name}. {Pron} dropped the old one and {does} now.",
	"{name} isn't doing that any more. {Pron} {does} now.",
	"Update on {name}: {pron} {does} now instead.",
	"{name} went and replaced {poss} {noun}: {new} now.",
	"Please fix the member list: {name}, {new}.",
	"For the list: {name}'s new {noun} is {new}.",
}

// unrestatedDistractors are routine turns of the unrestated family that
// name a member and a value, or a member and an attribute, without
// stating that member's habit: someone else's, a plan not carried out, a
// question, a recommendation. None of them is evidence, and none replaces
// a statement; a rule that takes one for an update drops the evidence it
// replaces. Placeholders as unrestatedUpdates', with {new} and {does} a
// value of any attribute.
var unrestatedDistractors = []string{
	"{name}'s sister {does}, funnily enough.",
	"{name} might try {new} one day, but nothing is decided.",
	"{name} asked whether anyone in the club {does}.",
	"{name} recommended {new} to a colleague from work.",
	"{name} is thinking about {doing} at some point, not yet though.",
	"Does anyone know a good shop for {new}? {name} is asking for a friend.",
	"{name}'s neighbour has switched to {new}, {name} says.",
	"{name} saw a documentary about someone who {does}.",
}

// unrestatedVerbs are, per attribute noun, its verb with the value as an
// update of the unrestated family says it: third person and gerund (%s
// the value).
var unrestatedVerbs = map[string][2]string{
	"instrument":     {"plays %s", "playing %s"},
	"sport":          {"does %s", "doing %s"},
	"ride":           {"gets around in %s", "getting around in %s"},
	"language class": {"studies %s", "studying %s"},
	"book":           {"is reading %s", "reading %s"},
}

// unrestatedHe are the members called he; the others are she.
var unrestatedHe = map[string]bool{
	"Tomasz": true, "Kwame": true, "Rahul": true, "Olu": true, "Emeka": true, "Mateus": true,
	"Dmitri": true, "Jonas": true, "Leif": true, "Soren": true, "Ignacio": true, "Kenji": true,
	"Bongani": true, "Viktor": true, "Henrik": true,
}

// unrestated fills template for name and attribute a with value (as an
// update says it).
func unrestated(template, name string, a genAttr, value string) string {
	pron, poss := "she", "her"
	if unrestatedHe[name] {
		pron, poss = "he", "his"
	}
	verbs := unrestatedVerbs[a.noun]
	return strings.NewReplacer(
		"{name}", name, "{pron}", pron, "{Pron}", strings.ToUpper(pron[:1])+pron[1:], "{poss}", poss,
		"{new}", value, "{noun}", a.noun,
		"{does}", strings.ReplaceAll(verbs[0], "%s", value), "{doing}", strings.ReplaceAll(verbs[1], "%s", value),
	).Replace(template)
}

// unrestatedDistractor is a distractor turn about name with a random
// attribute and value.
func unrestatedDistractor(r *rand.Rand, name string) string {
	a := genAttrs[r.Intn(len(genAttrs))]
	v := strings.ReplaceAll(a.bare, "%s", a.values[r.Intn(len(a.values))])
	return unrestated(unrestatedDistractors[r.Intn(len(unrestatedDistractors))], name, a, v)
}
