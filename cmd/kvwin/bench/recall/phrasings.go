package recall

// independentUpdates are the update phrasings of the independent family
// (GenerateFamily with FamilyIndependent): {subject} is the attribute
// named with its owner ("Tomasz's instrument"), {old} and {new} its
// values as an update says them ("the cello").
//
// Provenance: the issue asked for twenty phrasings written by a colleague
// who had not seen kvwin's rules. No such helper could be started in this
// session, so the engineer wrote them from the brief alone ("twenty varied
// natural English phrasings of a person updating a fact about themselves
// (moving city, changing job, new pet name, ...), with placeholders
// {subject} {old} {new}"), before reading the supersession code
// (window/memory/supersede.go, facts.go) or the team's update phrasings,
// and they are kept exactly as written. No default of the window was
// chosen by looking at this family's output.
var independentUpdates = []string{
	"Quick news: {subject} isn't {old} anymore, it's {new} now.",
	"So after all that back and forth, {subject} ended up being {new} instead of {old}.",
	"Remember when I said {subject} was {old}? Scratch that, {new}.",
	"Big change on my end: {subject} went from {old} to {new} last month.",
	"Turns out {old} didn't work out, so {subject} is {new} these days.",
	"Funny story, {subject} is officially {new}. Goodbye {old}!",
	"I finally did it, {subject} is {new}, no more {old} for me.",
	"These days {subject} = {new}. {old} feels like ages ago.",
	"Update for you: forget {old}, {subject} is {new}.",
	"We said farewell to {old}; {subject} has been {new} since spring.",
	"Not sure if I told you, but {subject} switched over to {new}. {old} was getting old.",
	"It's been a wild few weeks. {subject}? {new}. Used to be {old}, obviously.",
	"Heads up that {subject} is different now \u2014 {new}, not {old}.",
	"After a lot of thought I traded {old} for {new} as {subject}.",
	"lol so {subject} is {new} now, can you believe I left {old}",
	"Officially as of this week, {subject} changed: {new} (was {old}).",
	"Honestly {new} suits me better than {old} ever did, that's {subject} now.",
	"If anyone asks, {subject} is {new} \u2014 {old} is in the past.",
	"I've moved on from {old}; {new} is {subject} from here on.",
	"Correction to what I told you before: {subject} is {new}, it hasn't been {old} for a while.",
}
