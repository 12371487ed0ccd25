package memory

import (
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Supersession: a later statement about the same thing replaces an earlier
// one. "The same thing" is a (subject, cluster) pair from the fact analysis;
// "later" is a higher position among the candidates (below the cut) or any
// statement in the window, which always comes after the evicted turns it
// could replace.

// readWindow returns what a search reads of its window: the positions it
// holds, their normal texts (normalKey) and their facts against the
// collection's clusters, each turn's reading looked up once.
func (f *facts) readWindow(window []Turn) (map[int]bool, map[uint64]bool, map[string][]factAt) {
	pos, text, later := make(map[int]bool, len(window)), make(map[uint64]bool, len(window)), map[string][]factAt{}
	for _, t := range window {
		r := f.windowTurn(t)
		pos[t.Pos], text[r.norm] = true, true
		for _, x := range r.facts {
			k := historyKey(x)
			later[k] = append(later[k], factAt{pos: t.Pos, value: x.value})
		}
	}
	return pos, text, later
}

// windowTurn returns a window turn's reading, remembered by its position
// until the clusters change (its normal text until the turn does): a
// window is mostly the same turns from one ask to the next, and a search
// read all of them again, each hashed whole to be looked up.
func (f *facts) windowTurn(t Turn) *reading {
	r := f.readings[t.Pos]
	if r == nil || r.role != t.Role || r.text != t.Text {
		if r == nil && len(f.readings) >= maxReadings {
			clear(f.readings)
		}
		r = &reading{version: -1, role: t.Role, text: t.Text, norm: normalKey(t.Text)}
		f.readings[t.Pos] = r
	}
	if r.version != f.version {
		r.version, r.facts = f.version, f.turnFacts(t.Role, t.Text)
	}
	return r
}

// turnFacts reads a window turn's facts against the collection's clusters.
func (f *facts) turnFacts(role, text string) []fact {
	var out []fact
	prev := ""
	for _, s := range sentences(text) {
		st, ok := f.analyse(0, role, s, prev, false)
		prev = f.antecedent(st, s)
		if ok {
			fs := f.factsOf(st)
			st.pos = windowPos
			for _, x := range f.changes(st, fs) {
				fs = withChange(fs, x)
			}
			for _, x := range f.claims(st, fs) {
				fs = append(fs, x)
			}
			out = append(out, fs...)
		}
	}
	return out
}

// maxReadings bounds the window readings one fact analysis remembers.
const maxReadings = 4096

// reading is a window turn's normal text (normalKey) and its facts under
// one version of the clusters.
type reading struct {
	version    int
	role, text string
	norm       uint64
	facts      []fact
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
func (f *facts) superseded(pos int, among, window map[string][]factAt, ups func() *updaterList, subjects []string) bool {
	fs := f.byTurn[pos]
	if ups == nil {
		ups = func() *updaterList { return nil }
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
// (not every sentence of it is a question), with every short run of the
// words of what it asserts (assertedWords) hashed as the fact analysis
// hashes a value.
type updater struct {
	pos     int
	subject string
	// said are the turn's sayings, those asserts keeps for subjects its
	// words; has holds the spans of those words, made when a fact is
	// first checked against it: a long turn is split into words only
	// when its subject is a fact's.
	said     []saying
	subjects []string
	has      spanSet
	checked  int // facts checked against it before has was made (names)
	// text and role are the turn's; readings are the value readings
	// of its sentences, made when first needed (see generalOnly).
	text, role string
	readings   []candidate
}

// updaterList holds the turns that may update a statement about one of an
// ask's subjects and reads them into updaters latest first, only as far as
// a check needs: a fact at position p is replaced only by an updater after
// p, so a check stops at the first turn at or before p. The updaters it
// yields, and their order, are those of reading every turn at once (at most
// maxUpdaters, counted as they are read); a search over long turns reads
// few of them.
type updaterList struct {
	words    []string // room for an updater's words (spans), reused
	room     []uint64 // room for the updaters' spans (has), reused
	turns    []*Turn  // latest first
	subjects []string
	held     func(Turn) (turnText, bool) // what was read of a held turn
	next     int                         // turns[next] is the next turn to read
	read     []updater
}

// reset readies l to read the updaters among turns for statements about
// subjects (none if there are no subjects), keeping its room. It holds the
// turns, not copies: a Turn is too large to copy by the thousand.
func (l *updaterList) reset(turns []*Turn, subjects []string, held func(Turn) (turnText, bool)) {
	if len(subjects) == 0 {
		turns = turns[:0]
	}
	slices.SortFunc(turns, func(a, b *Turn) int { return b.Pos - a.Pos })
	*l = updaterList{turns: turns, subjects: subjects, held: held, read: l.read[:0], words: l.words[:0], room: l.room[:0]}
}

// release lets go of what l read (the turns and their texts), keeping its
// room for the next search.
func (l *updaterList) release() {
	clear(l.turns)
	clear(l.read)
	clear(l.words)
	*l = updaterList{turns: l.turns[:0], read: l.read[:0], words: l.words[:0], room: l.room[:0]}
}

// at returns the i-th updater (latest first) if it is later than pos,
// reading turns as far as that needs; false if there is none.
func (l *updaterList) at(i, pos int) (*updater, bool) {
	for i >= len(l.read) {
		if l.next >= len(l.turns) || len(l.read) >= maxUpdaters {
			return nil, false
		}
		t := l.turns[l.next]
		if t.Pos <= pos {
			return nil, false // neither it nor any turn after it is later
		}
		l.next++
		l.read = appendUpdaters(l.read, *t, l.subjects, l.held)
	}
	if l.read[i].pos <= pos {
		return nil, false
	}
	return &l.read[i], true
}

// all reads every updater (tests).
func (l *updaterList) all() []updater {
	for i := 0; ; i++ {
		if _, ok := l.at(i, -1<<62); !ok {
			return l.read
		}
	}
}

// appendUpdaters appends t's updaters to out: one per subject in subjects
// that t names (or, for the asker itself, that it said), if it states
// something. A turn the index holds was read as it was added (held).
func appendUpdaters(out []updater, t Turn, subjects []string, held func(Turn) (turnText, bool)) []updater {
	tt, ok := held(t) // else each check is read when first needed
	if !ok {
		tt.ascii = isASCII(t.Text)
	}
	named := false
	for _, s := range subjects {
		named = named || isRole(s, t.Role) || containsLower(t.Text, s, tt.ascii)
	}
	if !named {
		return out // cheap checks first: most candidates name no subject
	}
	if !ok {
		tt.states = states(t.Text)
	}
	if !tt.states {
		return out
	}
	if !ok {
		tt.sayings = sayings(t.Text)
	}
	for _, s := range subjects {
		named := isRole(s, t.Role) || slices.ContainsFunc(tt.sayings, func(a saying) bool { return asserts(a, subjects) && hasWord(a.words, s) })
		if named {
			out = append(out, updater{pos: t.Pos, subject: s, said: tt.sayings, subjects: subjects, text: t.Text, role: t.Role})
		}
	}
	return out
}

// turnText is what supersession reads of a turn's text: its sayings, and
// whether it is ASCII and states something (states), read once as the
// turn is added: a search checks hundreds of long turns for an ask's
// subjects, and reading each whole again was a tenth of its time.
type turnText struct {
	sayings       []saying
	ascii, states bool
}

func readTurnText(text string) turnText {
	return turnText{sayings: sayings(text), ascii: isASCII(text), states: states(text)}
}

// isRole reports whether subject is the speaker role ("@user").
func isRole(subject, role string) bool {
	return len(subject) == len(role)+1 && subject[0] == '@' && subject[1:] == role
}

// containsLower is strings.Contains(strings.ToLower(text), sub) for a
// lower-case sub and a text known to be ASCII or not (isASCII). In ASCII it
// lowers no copy of text and finds the places sub can start with
// strings.IndexByte, once for each case of its first letter (a long answer
// is read at memchr's speed, not a byte at a time).
func containsLower(text, sub string, ascii bool) bool {
	if !ascii {
		return strings.Contains(strings.ToLower(text), sub)
	}
	if len(sub) == 0 {
		return true
	}
	if len(sub) > len(text) {
		return false
	}
	lo, up := sub[0], sub[0]
	if 'a' <= lo && lo <= 'z' {
		up = lo - 'a' + 'A'
	}
	last := len(text) - len(sub) // the last place sub can start
	// The next place of each case at or after i, -1 once there is none.
	nextLo, nextUp := -2, -2
	for i := 0; i <= last; {
		if nextLo != -1 && nextLo < i {
			nextLo = indexFrom(text[:last+1], lo, i)
		}
		if up != lo && nextUp != -1 && nextUp < i {
			nextUp = indexFrom(text[:last+1], up, i)
		}
		j := nextLo
		if up != lo && nextUp >= 0 && (j < 0 || nextUp < j) {
			j = nextUp
		}
		if j < 0 {
			return false
		}
		if asciiLowerEqual(text[j:j+len(sub)], sub) {
			return true
		}
		i = j + 1
	}
	return false
}

// indexFrom is the index of c in s at or after from, or -1.
func indexFrom(s string, c byte, from int) int {
	if k := strings.IndexByte(s[from:], c); k >= 0 {
		return from + k
	}
	return -1
}

// isASCII reports whether s has no byte of 0x80 or above, eight bytes at
// a time.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if (s[i]|s[i+1]|s[i+2]|s[i+3]|s[i+4]|s[i+5]|s[i+6]|s[i+7])&0x80 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
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
	for s := range sentencesOf(text) {
		if !strings.HasSuffix(s, "?") {
			return true
		}
	}
	return false
}

// names reports whether u's words name value (a run of them hashes to
// it). Most updaters are checked once: the first check hashes the runs
// until one matches, and only a second one keeps them all, in a set, for the
// checks after it.
func (u *updater) names(value uint64, ups *updaterList) bool {
	if u.has.table == nil {
		ups.words = assertedWords(ups.words[:0], u.said, u.subjects)
		if u.checked++; u.checked == 1 {
			return eachSpan(ups.words, func(h uint64) bool { return h != value })
		}
		ups.room, u.has = spans(ups.room, ups.words)
	}
	return u.has.has(value)
}

// eachSpan calls yield with the hash of every run of up to maxValueWords
// words (see spans), until yield returns false; it reports whether one did.
func eachSpan(ws []string, yield func(uint64) bool) bool {
	for i := range ws {
		h := uint64(fnvOffset)
		for j := i; j < len(ws) && j < i+maxValueWords; j++ {
			if j > i {
				h = fnvAdd(h, " ")
			}
			if h = fnvAdd(h, ws[j]); !yield(h) {
				return true
			}
		}
	}
	return false
}

// spans appends to room a set of the hashes of every run of up to
// maxValueWords words (of the words joined by single spaces, as a fact's
// value is hashed: fnvAdd), and returns room and the set: a long turn has
// thousands, and a fact checks for one. The set is room's last entries,
// capped, so appending to room never changes it: one search's updaters
// share one room.
func spans(room []uint64, ws []string) ([]uint64, spanSet) {
	n := maxValueWords * len(ws) // at least the runs
	size := 16
	for size < 2*n {
		size *= 2 // at most half full: probes stay short
	}
	start := len(room)
	room = slices.Grow(room, size)[:start+size]
	set := spanSet{table: room[start : start+size : start+size]}
	clear(set.table)
	eachSpan(ws, func(h uint64) bool {
		set.add(h)
		return true
	})
	return room, set
}

// spanSet is a set of span hashes: open addressing with linear probing in
// a power-of-two table, 0 marking an empty entry (the hash 0 is kept
// apart). Made for each updater checked twice, it costs a pass over the
// spans where sorting them cost a sort.
type spanSet struct {
	table []uint64
	zero  bool
}

func (s *spanSet) add(h uint64) {
	if h == 0 {
		s.zero = true
		return
	}
	mask := uint64(len(s.table) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.table[i] {
		case h:
			return
		case 0:
			s.table[i] = h
			return
		}
	}
}

func (s spanSet) has(h uint64) bool {
	if h == 0 {
		return s.zero
	}
	mask := uint64(len(s.table) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.table[i] {
		case h:
			return true
		case 0:
			return false
		}
	}
}

// generalOnly reports whether u names value only in frames said of
// several attributes' values ("S recommended _ to a colleague": see
// generalFrames): what u says of it is no attribute of the subject.
func (f *facts) generalOnly(u *updater, value uint64) bool {
	if u.readings == nil {
		prev := ""
		for _, s := range sentences(u.text) {
			st, _ := f.analyse(0, u.role, s, prev, false)
			prev = f.antecedent(st, s)
			u.readings = append(u.readings, st.cands...)
		}
		u.readings = append(u.readings, candidate{}) // read
	}
	general := false
	for _, c := range u.readings {
		if c.value != value {
			continue
		}
		if !f.general[c.frame] {
			return false
		}
		general = true
	}
	return general
}

// updated reports whether a later turn in ups replaces fact x, said at
// pos: a turn about the same subject, found by the same search (or held
// by the window), that names the value x gave the attribute. It is the
// conversation's later word on that attribute of that subject, whatever
// its words or sentences: a change ("S's instrument isn't the cello
// anymore, it's the harp now", "Remember when I said S was curling?
// Scratch that, judo."), or a restatement, which carries the same value.
// The order of the conversation is the evidence of which is current; no
// list of verbs is. A turn that names the value only in a frame said of
// several attributes' values ("S recommended _ to a colleague") says
// nothing of the attribute (generalOnly).
func (f *facts) updated(x fact, pos int, ups *updaterList) bool {
	if ups == nil {
		return false
	}
	for i := 0; ; i++ {
		u, ok := ups.at(i, pos)
		if !ok {
			return false
		}
		if u.subject == x.subject && u.names(x.value, ups) && !f.generalOnly(u, x.value) {
			return true
		}
	}
}

// claims reads a statement that says something holds now or changed
// (statement.current) as the new value of an attribute of its subject
// when it names no value the attribute had but one value of that attribute
// alone: a value the conversation states in that attribute's frames and
// no other's. The frame it is said in need not be one ("Small change:
// Ines has switched and now drinks mint tea instead."): the value says
// which attribute, the marker that it is the value now. It must differ
// from the subject's value of the attribute before it (a later statement
// of the same value replaces nothing), and one must exist: there is
// nothing to supersede otherwise. Attributes a frame or a change of the
// statement already gives (stated) are left as they are; so are attributes
// named with two values, which would be a guess.
func (f *facts) claims(st statement, stated []fact) []fact {
	if !st.current {
		return nil
	}
	var known []candidate
	for _, c := range st.cands {
		if a, ok := f.attribute[c.value]; ok && a >= 0 {
			known = append(known, c)
		}
	}
	perAttr := map[int]map[uint64]bool{}
	for _, c := range known {
		// The widest span of an attribute's values ("mint tea", not
		// "mint"); a span inside another attribute's value is a reading
		// of its own ("plays the cello" and "cello").
		wider := false
		for _, d := range known {
			wider = wider || (f.attribute[d.value] == f.attribute[c.value] && d.start <= c.start && c.end <= d.end && d.end-d.start > c.end-c.start)
		}
		if wider {
			continue
		}
		a := f.attribute[c.value]
		if perAttr[a] == nil {
			perAttr[a] = map[uint64]bool{}
		}
		perAttr[a][c.value] = true
	}
	has := map[int]bool{}
	for _, x := range stated {
		if x.subject == st.subject {
			has[x.cluster] = true
		}
	}
	var out []fact
	for a, vs := range perAttr {
		if len(vs) != 1 || has[a] {
			continue
		}
		var v uint64
		for x := range vs {
			v = x // the one value
		}
		last, cur := -2, uint64(0)
		for _, y := range f.historyOf(historyKey(fact{subject: st.subject, cluster: a})) {
			if (y.pos < st.pos || st.pos == windowPos) && y.pos > last {
				last, cur = y.pos, y.value
			}
		}
		if last == -2 || cur == v {
			continue
		}
		out = append(out, fact{subject: st.subject, cluster: a, value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cluster < out[j].cluster })
	return out
}

// asserted returns what a sentence asserts: nothing if it hedges (a modal
// verb, "maybe", a verb of intending followed by "to", considering, or
// thinking about or of: "Omar might try the harp", "Omar plans to take up
// judo", "Omar is thinking about judo"; "the launch is planned for
// Friday" asserts), and otherwise the sentence
// without its clauses that report a question or a condition ("whether",
// "if", "unless") or describe someone else ("who", "which"), each up to
// the next comma, colon or semicolon: "Omar asked whether anyone plays the
// harp" asserts nothing of Omar's instrument. The words are English's
// closed classes of modals and subordinators and the common verbs of
// intention, taken from a grammar, not from any data set.
func asserted(sentence string) (string, bool) {
	fields := strings.Fields(sentence)
	lower := make([]string, len(fields))
	for i, f := range fields {
		w := strings.ToLower(strings.Trim(f, ",;:.!?\"'()"))
		w = strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "’s")
		lower[i] = w
	}
	for i, w := range lower {
		next := ""
		if i+1 < len(lower) {
			next = lower[i+1]
		}
		switch {
		case hedges[w] && !(w == "may" && fields[i][0] == 'M'):
			return "", false
		case intends[w] && next == "to", considers[w], thinks[w] && (next == "about" || next == "of"):
			return "", false
		}
	}
	out := fields[:0:0]
	skip := false
	for i, f := range fields {
		if subordinators[lower[i]] {
			skip = true
		}
		if !skip {
			out = append(out, f)
		}
		if skip && strings.ContainsAny(f[len(f)-1:], ",;:") {
			skip = false
		}
	}
	return strings.Join(out, " "), true
}

// saying is one sentence of a turn as assertedWords reads it: the
// lower-case words of what it asserts (the whole sentence for a question),
// joined by spaces.
type saying struct {
	words    string
	question bool
}

// sayings reads text's sentences for assertedWords, as far as that does
// not depend on the ask: what each asserts, or the whole of a question;
// a sentence that hedges, or is about a person its first name or "my" is
// the possessor of ("Omar's sister plays the harp"), is left out. The fact
// analysis reads every turn so as it is added (facts.add): a search reads
// hundreds of turns that may update a statement, and long ones cost it
// most of its time when it read them itself.
func sayings(text string) []saying {
	var out []saying
	for _, s := range sentences(text) {
		var ws []word
		question := strings.HasSuffix(s, "?")
		if question {
			ws = words(s)
		} else {
			said, ok := asserted(s)
			if !ok {
				continue
			}
			ws = words(said)
		}
		ofOther := false
		for i, w := range ws {
			if w.cap && w.poss || w.lower == "my" {
				ofOther = i+1 < len(ws) && relation[ws[i+1].lower]
				break
			}
		}
		if ofOther || len(ws) == 0 {
			continue
		}
		var b strings.Builder
		for i, w := range ws {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w.lower)
		}
		out = append(out, saying{words: b.String(), question: question})
	}
	return out
}

// assertedWords appends to out the lower-case words of the sayings of said
// that asserts keeps for subjects, sentence by sentence.
func assertedWords(out []string, said []saying, subjects []string) []string {
	for _, s := range said {
		if asserts(s, subjects) {
			for w := range strings.FieldsSeq(s.words) { // into out: no slice per saying
				out = append(out, w)
			}
		}
	}
	return out
}

// asserts reports whether a turn's saying s counts as what it asserts:
// every statement, and a question whole if it names one of subjects: it
// recalls what was said of them ("Remember when I said Omar's instrument
// was the banjo? Scratch that, the harp."); one that does not asks about
// what it names ("Does anyone know a shop for harps? Omar is asking.").
func asserts(s saying, subjects []string) bool {
	return !s.question || slices.ContainsFunc(subjects, func(w string) bool { return hasWord(s.words, w) })
}

// hasWord reports whether w is one of the words of words (split as
// strings.Fields splits), without splitting them.
func hasWord(words, w string) bool {
	if w == "" || strings.IndexFunc(w, unicode.IsSpace) >= 0 {
		return false // no field holds a space
	}
	for i := 0; i+len(w) <= len(words); {
		j := strings.Index(words[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before, _ := utf8.DecodeLastRuneInString(words[:j])
		after, _ := utf8.DecodeRuneInString(words[j+len(w):])
		if (j == 0 || unicode.IsSpace(before)) && (j+len(w) == len(words) || unicode.IsSpace(after)) {
			return true
		}
		i = j + 1
	}
	return false
}

var (
	hedges        = wordSet(`might may could would should maybe perhaps`)
	subordinators = wordSet(`whether if unless who whom whose which`)
	// intends, considers and thinks are verbs of intending and
	// considering, in every inflection.
	intends   = wordSet(`plan plans planned planning hope hopes hoped hoping wish wishes wished wishing want wants wanted wanting intend intends intended intending`)
	considers = wordSet(`consider considers considered considering`)
	moves     = wordSet(`move moves moved moving`)
	thinks    = wordSet(`think thinks thinking thought`)
	// relation are the nouns of a person by their tie to another: kin,
	// household, work and friendship.
	relation = wordSet(`sister sisters brother brothers sibling siblings mother father mom mum dad
	parent parents wife husband partner spouse son sons daughter daughters kid kids child children
	baby cousin cousins aunt uncle niece nephew grandma grandpa grandmother grandfather grandparents
	friend friends neighbour neighbours neighbor neighbors colleague colleagues coworker coworkers
	boss roommate flatmate girlfriend boyfriend fiance fiancee`)
)

func wordSet(list string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(list) {
		m[w] = true
	}
	return m
}

// currentMarked reports whether a sentence's words say that what it
// states holds now: a time adverb of the present ("now", "nowadays",
// "lately", "currently", "these days"), "new" or "latest", or a verb of
// moving on ("move"). With changeMarked's words, the sign a statement
// gives a new value (see claims).
func currentMarked(ws []word) bool {
	for i, w := range ws {
		switch w.lower {
		case "now", "nowadays", "lately", "currently", "new", "latest":
			return true
		case "these":
			if i+1 < len(ws) && ws[i+1].lower == "days" {
				return true
			}
		}
		if moves[w.lower] {
			return true
		}
	}
	return false
}
