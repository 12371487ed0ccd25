package memory

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Supersession: a later statement about the same thing replaces an earlier
// one. "The same thing" is a (subject, cluster) pair from the fact analysis;
// "later" is a higher position among the candidates (below the cut) or any
// statement in the window, which always comes after the evicted turns it
// could replace.

// windowFacts reads the window's turns against the collection's clusters.
func (f *facts) windowFacts(window []Turn) map[string][]factAt {
	out := map[string][]factAt{}
	for _, t := range window {
		for _, x := range f.turnFacts(t.Role, t.Text) {
			k := historyKey(x)
			out[k] = append(out[k], factAt{pos: t.Pos, value: x.value})
		}
	}
	return out
}

// turnFacts reads a window turn's facts against the collection's clusters,
// remembering the reading until the clusters change: a window is mostly the
// same turns from one ask to the next.
func (f *facts) turnFacts(role, text string) []fact {
	key := role + "\x00" + text
	if r, ok := f.readings[key]; ok && r.version == f.version {
		return r.facts
	}
	var out []fact
	for _, s := range sentences(text) {
		if st, ok := f.analyse(0, role, s, false); ok {
			fs := f.factsOf(st)
			st.pos = windowPos
			for _, x := range f.changes(st, fs) {
				fs = withChange(fs, x)
			}
			out = append(out, fs...)
		}
	}
	if len(f.readings) >= maxReadings {
		clear(f.readings)
	}
	f.readings[key] = reading{version: f.version, facts: out}
	return out
}

// maxReadings bounds the window readings one fact analysis remembers.
const maxReadings = 4096

// reading is a window turn's facts under one version of the clusters.
type reading struct {
	version int
	facts   []fact
}

// superseded reports whether the turn at pos says nothing current that the
// ask could need: every fact of it is replaced by a later fact with another
// value, stated by a turn the ask retrieved too (among, see factsAt) or in
// the window, except facts about named subjects other than those the ask
// names (subjects, see askSubjects), which the ask does not need ("Daniel
// is on call. Also, Sofia has rabbits." is stale for an ask about Daniel
// once Daniel's role changed). At least one fact must be replaced. A turn
// without facts is never superseded; nor is one whose replacement the
// packet would not carry: an old statement is dropped only in favour of the
// newer one the window will hold.
func (f *facts) superseded(pos int, among, window map[string][]factAt, ups func() []updater, subjects []string) bool {
	fs := f.byTurn[pos]
	if ups == nil {
		ups = func() []updater { return nil }
	}
	someReplaced := false
	for _, x := range fs {
		k := historyKey(x)
		switch {
		case replaced(x.value, pos, among[k]) || replaced(x.value, pos, window[k]) || f.updated(x, pos, ups()):
			someReplaced = true
		case x.aboutOther(subjects):
			// the ask does not need it
		default:
			return false
		}
	}
	return someReplaced
}

// factsAt returns the facts stated at positions, by subject and attribute.
func (f *facts) factsAt(positions []int) map[string][]factAt {
	out := map[string][]factAt{}
	for _, pos := range positions {
		for _, x := range f.byTurn[pos] {
			k := historyKey(x)
			out[k] = append(out[k], factAt{pos: pos, value: x.value})
		}
	}
	return out
}

// replaced: some fact after pos has another value.
func replaced(value uint64, pos int, later []factAt) bool {
	for _, y := range later {
		if y.pos > pos && y.value != value {
			return true
		}
	}
	return false
}

// askSubjects returns the subjects an ask names: the conversation's names in
// it, or, if it names none, the asker when it speaks of itself ("where do I
// live now?").
func (f *facts) askSubjects(ask, asker string) []string {
	if asker == "" {
		asker = "user"
	}
	var out []string
	seen := map[string]bool{}
	self := false
	for _, w := range words(ask) {
		switch {
		case f.entities[w.lower] && !seen[w.lower]:
			seen[w.lower] = true
			out = append(out, w.lower)
		case firstPerson[w.lower]:
			self = true
		}
	}
	if len(out) == 0 && self {
		out = append(out, "@"+asker)
	}
	return out
}

// aboutOthers reports whether the turn at pos states facts and all of them
// are about named subjects other than those the ask names (none if the ask
// names none).
func (f *facts) aboutOthers(pos int, subjects []string) bool {
	fs := f.byTurn[pos]
	if len(fs) == 0 {
		return false
	}
	for _, x := range fs {
		if !x.aboutOther(subjects) {
			return false
		}
	}
	return true
}

// aboutOther reports whether x is about a named subject other than those
// the ask names (never when the ask names none; a speaker's facts about
// themself, "@role", always concern the ask).
func (x fact) aboutOther(subjects []string) bool {
	return len(subjects) > 0 && !strings.HasPrefix(x.subject, "@") && !slices.Contains(subjects, x.subject)
}

// maxUpdaters bounds the turns one search reads as possible updates: a
// packet holds tens of turns, and the latest statements are the ones that
// count.
const maxUpdaters = 256

// updater is a turn that may update what an earlier turn said about one
// of the ask's subjects: a candidate or window turn that names the subject
// (or, for the asker itself, that the asker said) and states something
// (not every sentence of it is a question), with every short run of its
// words hashed as the fact analysis hashes a value.
type updater struct {
	pos     int
	subject string
	ws      []word
	has     map[uint64]bool // spans(ws), made when a fact is first checked against it
}

// updaters returns, latest first, the turns among turns that may update a
// statement about one of subjects.
func updaters(turns []Turn, subjects []string) []updater {
	if len(subjects) == 0 {
		return nil
	}
	// Latest first, by index: a Turn is too large to move around in a sort.
	order := make([]int32, len(turns))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return turns[b].Pos - turns[a].Pos })
	var out []updater
	for _, i := range order {
		if len(out) >= maxUpdaters {
			break
		}
		t := turns[i]
		named := false
		for _, s := range subjects {
			named = named || isRole(s, t.Role) || containsLower(t.Text, s)
		}
		if !named || !states(t.Text) {
			continue // cheap checks first: most candidates name no subject
		}
		ws := words(t.Text)
		for _, s := range subjects {
			named := isRole(s, t.Role)
			for _, w := range ws {
				named = named || w.lower == s
			}
			if named {
				out = append(out, updater{pos: t.Pos, subject: s, ws: ws})
			}
		}
	}
	return out
}

// isRole reports whether subject is the speaker role ("@user").
func isRole(subject, role string) bool {
	return len(subject) == len(role)+1 && subject[0] == '@' && subject[1:] == role
}

// containsLower is strings.Contains(strings.ToLower(text), sub) for a
// lower-case sub, without lowering a copy of text where text is ASCII.
func containsLower(text, sub string) bool {
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			return strings.Contains(strings.ToLower(text), sub)
		}
	}
	if len(sub) == 0 {
		return true
	}
	for i := 0; i+len(sub) <= len(text); i++ {
		if c := text[i]; c|0x20 == sub[0] || c == sub[0] {
			if asciiLowerEqual(text[i:i+len(sub)], sub) {
				return true
			}
		}
	}
	return false
}

// asciiLowerEqual reports whether the ASCII text a, lowered, is b.
func asciiLowerEqual(a, b string) bool {
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
}

// states reports whether some sentence of text is not a question.
func states(text string) bool {
	for _, s := range sentences(text) {
		if !strings.HasSuffix(s, "?") {
			return true
		}
	}
	return false
}

// spans returns the hashes of every run of up to maxValueWords words.
func spans(ws []word) map[uint64]bool {
	out := map[uint64]bool{}
	for i := range ws {
		var b strings.Builder
		for j := i; j < len(ws) && j < i+maxValueWords; j++ {
			if j > i {
				b.WriteByte(' ')
			}
			b.WriteString(ws[j].lower)
			out[xxhash.Sum64String(b.String())] = true
		}
	}
	return out
}

// updated reports whether a later turn in ups replaces fact x, said at
// pos: a turn about the same subject, found by the same search (or held
// by the window), that names the value x gave the attribute. It is the
// conversation's later word on that attribute of that subject, whatever
// its words or sentences: a change ("S's instrument isn't the cello
// anymore, it's the harp now", "Remember when I said S was curling?
// Scratch that, judo."), or a restatement, which carries the same value.
// The order of the conversation is the evidence of which is current; no
// list of verbs is.
func (f *facts) updated(x fact, pos int, ups []updater) bool {
	for i := range ups {
		u := &ups[i]
		if u.pos > pos && u.subject == x.subject {
			if u.has == nil {
				u.has = spans(u.ws)
			}
			if u.has[x.value] {
				return true
			}
		}
	}
	return false
}
