package memory

// The fact analysis finds, with no vocabulary of its own beyond English
// function words, which turns state something about a named thing and
// which later turns replace them.
//
// A statement is a sentence with a subject: the first name in it (a word the
// conversation writes capitalized in mid-sentence and never in lower case),
// or the speaker when it begins with "I" or "my". Masking the subject and one
// short run of content words (the value) leaves a frame: "Omar moved to
// Valparaiso last spring" gives "S moved to _ last spring" with the value
// "valparaiso". A frame that recurs with different values is a slot; slots
// that share two or more values describe the same attribute and form a
// cluster ("S moved to _ last spring", "S relocated again this time to _").
// A statement's facts are its (subject, cluster, value) triples. A
// sentence that names a subject's current value and one other value the
// conversation knows is a change to that value ("S swapped X for Y"); one
// that names the current value, no other known one, and says that it
// stopped holding (a negator, a contrast, a verb of substitution or
// cessation: see changeMarked) is a change to a value left unnamed.
//
// Invariants:
//   - The analysis is a pure function of the set of turns added, whatever
//     the order or batching of Add: entity detection and clustering are
//     recomputed from counts whenever they could have changed.
//   - Supersession (see superseded) only ever compares facts with the same
//     subject and cluster; a fact is replaced by a later fact with a
//     different value, never by a restatement of the same value.

import (
	"regexp"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// maxValueWords bounds the value span: attribute values are short ("grey
// cat", "on-call coordinator"); longer spans only multiply frames.
const maxValueWords = 3

// candidate is one way to read a statement as a frame and a value.
type candidate struct {
	frame, value uint64
	start, end   int // the value's word span in the whole sentence
}

// statement is one analysed sentence of a turn.
type statement struct {
	pos     int
	subject string
	cands   []candidate
	// marked: the sentence says that something stopped holding or gave
	// way to something else (see changeMarked).
	marked bool
	// current: marked, or the sentence says that what it states holds now
	// (see currentMarked): it may state a new value (see claims).
	current bool
}

// frameStat is what the conversation has said in one frame.
type frameStat struct {
	values     map[uint64]struct{}
	subject    string // first subject seen
	subjects   int    // 1, or 2 meaning "two or more"
	firstWord  uint64 // of the first multi-word value
	lastWord   uint64
	allMulti   bool // every value has more than one word
	sameFirst  bool // every value starts with firstWord
	sameLast   bool // every value ends with lastWord
	valueCount int
}

// fact is one attribute value a statement gives its subject.
type fact struct {
	subject string
	cluster int
	value   uint64
}

// facts is the fact analysis of a set of turns. It is not safe for
// concurrent use; owners guard it.
type facts struct {
	roles    map[int]string
	texts    map[int]string
	said     map[int]turnText           // pos → the turn's sayings and text checks, read once (see turnText)
	capLater map[string]int             // lower-case word → times capitalized after a sentence's first word
	lower    map[string]int             // lower-case word → times written in lower case
	starts   map[string]map[string]bool // capitalized first word → words seen after it (up to 2)
	entities map[string]bool
	// addressed counts, per name, the turns of each role that address it
	// ("Thanks, Omar!"): in a two-party chat, the name of the other party.
	addressed map[string]map[string]int

	version  int              // bumped whenever clusters are derived anew
	readings map[int]*reading // window turn's position → its reading, see windowTurn

	stmts  []statement
	frames map[uint64]*frameStat

	// Derived by finish; valid while fresh. See settle.go for what an
	// extension (rather than a rebuild) keeps.
	fresh     bool
	settle    settleState
	cluster   map[uint64]int  // slot or attached frame → cluster id
	general   map[uint64]bool // frames said of several attributes' values (see generalFrames)
	byTurn    map[int][]fact  // pos → facts of its statements
	bySubject map[string][]int
	history   map[string][]factAt // subject+cluster → facts in position order
	// clustersOf lists, per subject, the clusters it has a history in: the
	// only ones a statement about it can change (see changes).
	clustersOf map[string][]int
	values     map[int]map[uint64]bool // cluster → the values stated in it
	attribute  map[uint64]int          // value → the cluster it belongs to, -1 if none (see attributes)
	stated     map[uint64]bool         // every value stated
}

type factAt struct {
	pos   int
	value uint64
}

func newFacts() *facts {
	return &facts{
		roles: map[int]string{}, texts: map[int]string{}, said: map[int]turnText{},
		capLater: map[string]int{}, lower: map[string]int{}, starts: map[string]map[string]bool{}, entities: map[string]bool{},
		addressed: map[string]map[string]int{}, readings: map[int]*reading{},
		frames: map[uint64]*frameStat{},
	}
}

// add analyses turns. A turn whose position is already known is ignored.
func (f *facts) add(turns []Turn) {
	var added []Turn
	for _, t := range turns {
		if _, ok := f.texts[t.Pos]; ok {
			continue
		}
		f.texts[t.Pos], f.roles[t.Pos] = t.Text, t.Role
		f.said[t.Pos] = readTurnText(t.Text)
		added = append(added, t)
		for _, s := range sentences(t.Text) {
			for _, m := range vocative.FindAllStringSubmatch(s, -1) {
				name := strings.ToLower(m[2])
				if f.addressed[name] == nil {
					f.addressed[name] = map[string]int{}
				}
				f.addressed[name][t.Role]++
			}
			ws := words(s)
			for i, w := range ws {
				switch {
				case !w.cap:
					f.lower[w.lower]++
				case i > 0:
					f.capLater[w.lower]++
				case len(ws) > 1 && !labelled(s):
					next := f.starts[w.lower]
					if next == nil {
						next = map[string]bool{}
						f.starts[w.lower] = next
					}
					if len(next) < 2 {
						next[ws[1].lower] = true
					}
				}
			}
		}
	}
	if len(added) == 0 {
		return
	}
	f.fresh = false
	if ents := f.detectEntities(); !sameSet(ents, f.entities) {
		// Names decide subjects and frames: re-read everything.
		f.entities = ents
		f.stmts, f.frames = nil, map[uint64]*frameStat{}
		f.settle.reread()
		added = added[:0]
		for pos, text := range f.texts {
			added = append(added, Turn{Pos: pos, Role: f.roles[pos], Text: text})
		}
	}
	for _, t := range added {
		prev := ""
		for _, s := range sentences(t.Text) {
			st, ok := f.analyse(t.Pos, t.Role, s, prev, true)
			if ok {
				f.stmts = append(f.stmts, st)
			}
			prev = f.antecedent(st, s)
		}
	}
}

// heldText returns what was read of t when it was added, if it is held
// with that text (a window's turn may be an excerpt, or not held).
func (f *facts) heldText(t Turn) (turnText, bool) {
	if s, ok := f.said[t.Pos]; ok && f.texts[t.Pos] == t.Text {
		return s, true
	}
	return turnText{}, false
}

// antecedent is who "he" or "she" in the sentence after sentence (read as
// st) stands for: its named subject, else the name it mentions last ("I
// spoke to Astrid yesterday. She's switched to rowing."), else none.
func (f *facts) antecedent(st statement, sentence string) string {
	if s := named(st.subject); s != "" {
		return s
	}
	ws := words(sentence)
	for i := len(ws) - 1; i >= 0; i-- {
		if f.entities[ws[i].lower] && !ws[i].poss {
			return ws[i].lower
		}
	}
	return ""
}

// detectEntities: a name is a word never written in lower case that is
// capitalized in mid-sentence ("forward this to Omar"), or that starts
// sentences with different words after it ("Omar moved", "Omar has"), which
// sets names apart from fixed openers ("Update on", "Heads up").
func (f *facts) detectEntities() map[string]bool {
	ents := map[string]bool{}
	for w, n := range f.capLater {
		if n > 0 && f.lower[w] == 0 && !stopword[w] && !firstPerson[w] {
			ents[w] = true
		}
	}
	for w, next := range f.starts {
		if len(next) >= 2 && f.lower[w] == 0 && !stopword[w] && !firstPerson[w] {
			ents[w] = true
		}
	}
	return ents
}

// labelled reports whether a sentence opens with one word and a colon
// ("Update: Omar moved"): a label, not a name, whatever follows it.
func labelled(sentence string) bool {
	i := strings.IndexAny(sentence, " :")
	return i > 0 && sentence[i] == ':'
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// vocative matches a name used to address someone: a capitalized word at
// the start of a sentence, after its first word or after a comma, and set
// off by a comma, "!", "?" or the sentence's end ("Thanks, Omar.", "Hey
// Omar!", "Omar, look"). English sets a vocative off by punctuation; a
// subject is followed by its verb ("Omar moved"), so this never drops one.
var vocative = regexp.MustCompile(`(^|,\s+|^[^\s,]+\s+)(\p{Lu}[\p{L}\p{M}'’-]*)\s*([,!?;]|\.?\s*$)`)

// dropVocatives removes the names a sentence addresses: they are not what
// it is about ("That sounds great, Caroline." states nothing of Caroline).
func dropVocatives(sentence string) string {
	for range 3 { // "Wow, Omar, that's great": one match may hide the next
		next := strings.TrimSpace(vocative.ReplaceAllString(sentence, "$1"))
		if next == sentence {
			break
		}
		sentence = next
	}
	return sentence
}

// subjectOf returns the index and name of a word list's subject: its first
// name, or the speaker for a first-person word, or, for "he" or "she" before
// either, prev (the named subject of the sentence before in the same turn:
// "Bumped into Omar. He plays the harp now."). A name or "my" followed by a
// person it is the possessor of ("Omar's sister", "my neighbour") makes
// that person the subject, who is no one the conversation names: none
// (if strict; otherwise the possessor stands for the sentence's subject).
func (f *facts) subjectOf(ws []word, role, prev string, strict bool) (int, string) {
	for i, w := range ws {
		ofOther := strict && i+1 < len(ws) && relation[ws[i+1].lower]
		switch {
		case f.entities[w.lower]:
			if ofOther && w.poss {
				return -1, ""
			}
			return i, w.lower
		case firstPerson[w.lower] && role != "":
			if ofOther && w.lower == "my" {
				return -1, ""
			}
			return i, "@" + role
		case (w.lower == "he" || w.lower == "she") && prev != "":
			return i, prev
		}
	}
	return -1, ""
}

// named returns subject if it is a name, not the speaker ("@user") or none.
func named(subject string) string {
	if strings.HasPrefix(subject, "@") {
		return ""
	}
	return subject
}

// analyse reads one sentence, registering its frames if register is set
// (turns of the collection) and not otherwise (turns of a window, read
// against the collection's clusters without changing them). Leading clauses
// without the subject are dropped one at a time, so "By the way, Omar only
// ever orders chai" also yields the frames of "Omar only ever orders chai".
//
// Only what the sentence asserts of its subject is read (see asserted): a
// sentence that hedges states nothing, and a clause that reports a
// question or describes someone else is left out.
func (f *facts) analyse(pos int, role, sentence, prev string, register bool) (statement, bool) {
	st := statement{pos: pos}
	if strings.HasSuffix(sentence, "?") {
		return st, false // a question states nothing
	}
	whole := dropVocatives(sentence)
	said, ok := asserted(whole)
	if register && (!ok || said != whole) {
		// What it does not assert still says which values go with which
		// words ("Omar might try the harp", "Omar asked whether anyone
		// plays the harp"): its frames count for the attributes, though
		// it states nothing of Omar.
		f.read(&statement{}, whole, role, prev, true, false)
	}
	if !ok {
		return st, false
	}
	f.read(&st, said, role, prev, register && said == whole, true)
	// Only a named subject's statement is read as a change (see changes).
	ws := words(said)
	st.marked = named(st.subject) != "" && changeMarked(ws)
	st.current = named(st.subject) != "" && (st.marked || currentMarked(ws))
	return st, st.subject != ""
}

// read reads a sentence's frames into st, registering them if register is
// set; strict is subjectOf's.
func (f *facts) read(st *statement, sentence, role, prev string, register, strict bool) {
	total := len(words(sentence))
	cls := clauses(sentence)
	for i := range cls {
		ws := words(strings.Join(cls[i:], " "))
		si, subj := f.subjectOf(ws, role, prev, strict)
		if si < 0 || (st.subject != "" && subj != st.subject) {
			break
		}
		st.subject = subj
		f.frameCandidates(st, ws, si, total-len(ws), register)
		if si2, _ := f.subjectOf(words(cls[i]), role, prev, strict); si2 >= 0 {
			break // the next variant would lose the subject
		}
	}
}

func (f *facts) frameCandidates(st *statement, ws []word, si, offset int, register bool) {
	n := len(ws)
	for i := 0; i < n; i++ {
		for l := 1; l <= maxValueWords && i+l <= n; l++ {
			j := i + l
			if i <= si && si < j {
				break
			}
			if stopword[ws[j-1].lower] || firstPerson[ws[j-1].lower] {
				break
			}
			if n-l+1 < 3 {
				continue // "S _" says nothing
			}
			var key strings.Builder
			for k, w := range ws {
				switch {
				case k == i:
					key.WriteString("_ ")
				case k > i && k < j:
					continue
				case k == si:
					key.WriteString("S ")
				default:
					key.WriteString(w.lower + " ")
				}
			}
			val := uint64(fnvOffset)
			for k := i; k < j; k++ {
				if k > i {
					val = fnvAdd(val, " ")
				}
				val = fnvAdd(val, ws[k].lower)
			}
			c := candidate{frame: xxhash.Sum64String(key.String()), value: val, start: offset + i, end: offset + j}
			st.cands = append(st.cands, c)
			if register {
				f.register(c, st.subject, ws[i].lower, ws[j-1].lower, l > 1)
			}
		}
	}
}

func (f *facts) register(c candidate, subject, first, last string, multi bool) {
	fs := f.frames[c.frame]
	if fs == nil {
		fs = &frameStat{values: map[uint64]struct{}{}, subject: subject, subjects: 1, allMulti: true, sameFirst: true, sameLast: true}
		f.frames[c.frame] = fs
	}
	read, changed := fs.clusters(), false
	if subject != fs.subject && fs.subjects < 2 {
		fs.subjects, changed = 2, true
	}
	if _, ok := fs.values[c.value]; !ok {
		fs.values[c.value] = struct{}{}
		fw, lw := xxhash.Sum64String(first), xxhash.Sum64String(last)
		if fs.valueCount == 0 {
			fs.firstWord, fs.lastWord = fw, lw
		}
		fs.valueCount++
		fs.allMulti = fs.allMulti && multi
		fs.sameFirst = fs.sameFirst && fw == fs.firstWord
		fs.sameLast = fs.sameLast && lw == fs.lastWord
		changed = true
	}
	// A frame clusterFrames reads (before or now) changed: the clusters
	// must be derived anew (see settleState).
	f.settle.dirty = f.settle.dirty || (changed && (read || fs.clusters()))
}

// clusters reports whether clusterFrames reads the frame: a slot, or a
// frame of one value said of two or more subjects.
func (fs *frameStat) clusters() bool {
	return fs.isSlot() || (fs.valueCount == 1 && fs.subjects >= 2)
}

// isSlot: a frame said with two or more values, where the value span is as
// tight as it can be. If every value starts (or ends) with the same word,
// that word belongs to the frame and a tighter frame exists.
func (fs *frameStat) isSlot() bool {
	return fs.valueCount >= 2 && !(fs.allMulti && (fs.sameFirst || fs.sameLast))
}

// changes reads a statement as a change of an attribute's value: it names
// the subject's value of the attribute as of its position (the latest
// before it) and another value the conversation gives that attribute, and
// states no other value of that attribute through a frame. The other value is
// the new one: a newer statement about the same subject and attribute
// supersedes the older. The conversation's own values are the only
// vocabulary: "swapped X for Y", "from X to Y", "Y instead of X" alike.
// Only statements about a named subject are read so: speakers talking of
// themselves name several things they like in one breath ("I love fantasy
// and sci-fi movies"), which is no change of either.
func (f *facts) changes(st statement, stated []fact) []fact {
	if len(st.cands) == 0 || strings.HasPrefix(st.subject, "@") {
		return nil
	}
	has := map[int]uint64{}
	for _, x := range stated {
		if x.subject == st.subject {
			has[x.cluster] = x.value
		}
	}
	vals := map[uint64]bool{}
	for _, c := range st.cands {
		vals[c.value] = true
	}
	var out []fact
	// Only the clusters the subject has a history in can hold a value to
	// change: the others are skipped at once below.
	for _, c := range f.clustersOf[st.subject] {
		if f.values[c] == nil {
			continue
		}
		sv, said := has[c]
		h := f.historyOf(historyKey(fact{subject: st.subject, cluster: c}))
		cur, ok := uint64(0), false
		for _, y := range h {
			if y.pos < st.pos || st.pos == windowPos {
				cur, ok = y.value, true
			}
		}
		if !ok || !vals[cur] || (said && sv != cur) {
			continue // no value to change, or a frame states the value
		}
		switch v, n := f.otherValue(st, cur); {
		case n == 1:
			out = append(out, fact{subject: st.subject, cluster: c, value: v})
		case n == 0 && st.marked:
			// "S gave up X; it's Y these days", Y said nowhere else: the
			// new value is none the conversation knows, but it is not X.
			out = append(out, fact{subject: st.subject, cluster: c, value: unnamedValue(st.pos)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cluster < out[j].cluster })
	return out
}

// otherValue returns the value, other than cur, that st names and the
// conversation states of anything (an attribute's values may be spread
// over clusters its phrasings did not join): the widest such spans that do
// not overlap cur's, and how many distinct ones there are. Only n == 1
// names the new value; two or more would be a guess.
func (f *facts) otherValue(st statement, cur uint64) (uint64, int) {
	var curSpans, known []candidate
	for _, c := range st.cands {
		switch {
		case c.value == cur:
			curSpans = append(curSpans, c)
		case f.stated[c.value]:
			known = append(known, c)
		}
	}
	overlaps := func(a, b candidate) bool { return a.start < b.end && b.start < a.end }
	found, n := uint64(0), 0
	for _, c := range known {
		skip := false
		for _, d := range curSpans {
			skip = skip || overlaps(c, d)
		}
		for _, d := range known {
			skip = skip || (d.start <= c.start && c.end <= d.end && d.end-d.start > c.end-c.start)
		}
		if !skip && (n == 0 || c.value != found) {
			found, n = c.value, n+1
		}
	}
	return found, n
}

// A value is hashed as 64-bit FNV-1a of its lower-case words joined by
// single spaces: extended a word at a time, the hash of a run of words is
// the hash of the run one word shorter continued (eachSpan hashes every run
// of a long turn's words), where a finishing hash must start each run anew.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvAdd continues the FNV-1a hash h with the bytes of s.
func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// unnamedValue stands for a new value a change states in words the
// conversation gives no attribute elsewhere: distinct from every stated
// value and from the unnamed value of any other statement.
func unnamedValue(pos int) uint64 {
	return xxhash.Sum64String("\x00unnamed\x00" + itoa(pos))
}

// changeMarked reports whether a sentence's words say that something
// stopped holding or gave way to another: a negator ("not", "no", "never",
// "nor", any "n't"), a contrast ("instead", "rather", "anymore"), or a
// verb of substitution or cessation ("swap", "switch", "replace", "trade",
// "change", "exchange", "quit", "stop", "drop", "give up", "go over to"),
// or of correcting a record ("correct", "amend", "fix"). The list is
// English's closed class of negators and contrastive adverbs and the
// common change-of-state verbs, taken from a grammar, not from any data
// set; words are compared by stem, so every inflection counts.
func changeMarked(ws []word) bool {
	for i, w := range ws {
		if strings.HasSuffix(w.lower, "n't") || strings.HasSuffix(w.lower, "n’t") {
			return true
		}
		s := stem(w.lower)
		if changeStems[s] {
			return true
		}
		if (s == "gave" || s == "give" || s == "given") && i+1 < len(ws) && ws[i+1].lower == "up" {
			return true
		}
		if goesOver[s] && i+2 < len(ws) && ws[i+1].lower == "over" && ws[i+2].lower == "to" {
			return true // went over to, has gone over to, crossed over to
		}
	}
	return false
}

// goesOver are the verbs of "X over to": changing sides.
var goesOver = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`go goes going gone went cross crossed come came move moved`) {
		m[stem(w)] = true
	}
	return m
}()

var changeStems = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`not no never nor instead rather anymore swap switch replace trade
	change exchange quit stop drop correct correction amend fix`) {
		m[stem(w)] = true
	}
	return m
}()

// withChange returns fs with x in place of any fact of x's subject and
// attribute: a frame that read a change sentence as restating the old
// value ("no longer bothers with _ but with ...") yields to the change.
func withChange(fs []fact, x fact) []fact {
	out := fs[:0:0]
	for _, y := range fs {
		if y.subject != x.subject || y.cluster != x.cluster {
			out = append(out, y)
		}
	}
	return append(out, x)
}

// windowPos marks a statement read from the window, later than any held.
const windowPos = -1

func historyKey(x fact) string {
	var b strings.Builder
	b.WriteString(x.subject)
	b.WriteByte(0)
	b.WriteString(itoa(x.cluster))
	return b.String()
}

// factsOf reads a statement's facts with the current clusters: among its
// readings in a clustered frame, only the widest value spans count, so "mint
// tea" wins over "mint" read in a narrower frame.
func (f *facts) factsOf(st statement) []fact {
	var hits []candidate
	for _, c := range st.cands {
		if _, ok := f.cluster[c.frame]; ok {
			hits = append(hits, c)
		}
	}
	var out []fact
	seen := map[fact]bool{}
	for _, c := range hits {
		inside := false
		for _, d := range hits {
			if d.start <= c.start && c.end <= d.end && (d.end-d.start) > (c.end-c.start) {
				inside = true
				break
			}
		}
		x := fact{subject: st.subject, cluster: f.cluster[c.frame], value: c.value}
		if !inside && !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func sortUnique(xs []int) []int {
	sort.Ints(xs)
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// speakerOf returns the role a name belongs to: in a conversation between
// a user and an assistant, the name the other party addresses at least
// twice, and at least twice as often as the party itself does. "" if the
// conversation does not say.
func (f *facts) speakerOf(name string) string {
	by := f.addressed[name]
	u, a := by["user"], by["assistant"]
	switch {
	case a >= 2 && a >= 2*u:
		return "user"
	case u >= 2 && u >= 2*a:
		return "assistant"
	}
	return ""
}
