package memory

// Settling the fact analysis: finish derives clusters and facts from the
// statements, either anew (rebuild, over every statement) or, when the
// statements added since the last finish cannot change what it derived for
// the earlier ones, by reading only the new ones (extend). A conversation
// adds a turn and searches, turn after turn: a rebuild per turn grows with
// the history, an extension with the turn.
//
// Invariants:
//   - After finish, the derived state (cluster, general, attribute, byTurn,
//     bySubject, history, values, stated, clustersOf) is the same whether
//     it was extended or rebuilt: an extension happens only when a rebuild
//     would give the earlier statements the same facts, that is when
//       - no name was found (add re-reads every turn then),
//       - no frame clusterFrames reads changed (the clusters and the
//         attributes of values stay as they are),
//       - every new statement is later than every earlier one (an earlier
//         statement's claims and changes read only the history before it),
//       - no value the new statements state for the first time is among
//         the candidate values of an earlier statement that changes reads
//         (changes counts the known values a statement names: see
//         otherValue);
//     TestSettleExtendsAsRebuilt holds the two to equality.
//   - work[k] is history[k] in the order the claims and changes pass left
//     it: the first-pass facts sorted by position and value (its first
//     firstN[k] entries), then what the pass appended. A claim or a change
//     reads the latest value before it in that order (see historyOf), so an
//     extension reads the order a rebuild would have built.

import (
	"slices"
	"sort"
)

// settleState is what finish keeps to extend its analysis.
type settleState struct {
	// dirty: a frame clusterFrames reads changed since the clusters were
	// derived (facts.register).
	dirty bool
	// rebuild: the statements were read anew (new names) since the last
	// finish.
	rebuild  bool
	settled  int // statements analysed by the last finish
	extended int // finishes that extended (tests)
	maxPos   int // the latest position among them; -1 if none
	// passing: a claims and changes pass is under way; historyOf reads work.
	passing bool
	work    map[string][]factAt
	firstN  map[string]int
	// candValues are the candidate values of the statements changes reads
	// (a named subject's): a value stated for the first time changes their
	// reading only if it is among them.
	candValues map[uint64]bool
}

// reread notes that the statements are read anew from the turns.
func (s *settleState) reread() {
	s.rebuild, s.dirty = true, true
}

// historyOf is the history of a subject's attribute as claims and changes
// read it: during finish's pass, as the pass has built it so far (work);
// after it, settled (history).
func (f *facts) historyOf(k string) []factAt {
	if f.settle.passing {
		return f.settle.work[k]
	}
	return f.history[k]
}

// finish derives clusters and facts. It is cheap to call when fresh.
func (f *facts) finish() {
	if f.fresh {
		return
	}
	f.fresh = true
	f.version++
	if !f.extend() {
		f.rebuild()
	}
}

// rebuild derives clusters and facts from every statement.
func (f *facts) rebuild() {
	s := &f.settle
	f.cluster, f.general = clusterFrames(f.frames)
	f.attribute = attributes(f.frames, f.cluster)
	f.byTurn = map[int][]fact{}
	f.bySubject = map[string][]int{}
	f.clustersOf = map[string][]int{}
	f.values, f.stated = map[int]map[uint64]bool{}, map[uint64]bool{}
	s.work, s.firstN, s.candValues = map[string][]factAt{}, map[string]int{}, map[uint64]bool{}
	s.maxPos = -1
	for _, st := range f.stmts {
		f.firstPass(st, f.factsOf(st), nil)
	}
	for k, h := range s.work {
		sortFacts(h)
		s.firstN[k] = len(h)
	}
	f.claimsAndChanges(f.stmts, nil)
	f.history = make(map[string][]factAt, len(s.work))
	for k, h := range s.work {
		f.history[k] = sortFacts(slices.Clone(h))
	}
	for k := range f.bySubject {
		f.bySubject[k] = sortUnique(f.bySubject[k])
	}
	s.settled, s.dirty, s.rebuild = len(f.stmts), false, false
}

// extend analyses the statements added since the last finish, if that
// gives what a rebuild would (see the invariants); it reports whether it
// did.
func (f *facts) extend() bool {
	s := &f.settle
	if f.cluster == nil || s.dirty || s.rebuild {
		return false
	}
	added := f.stmts[s.settled:]
	read := make([][]fact, len(added))
	for i, st := range added {
		if st.pos <= s.maxPos {
			return false
		}
		read[i] = f.factsOf(st)
		for _, x := range read[i] {
			if !f.stated[x.value] && s.candValues[x.value] {
				return false
			}
		}
	}
	before := s.maxPos
	touched := map[string]bool{}
	for i, st := range added {
		f.firstPass(st, read[i], touched)
	}
	for k := range touched {
		// Every earlier fact is at or before before: only the new ones
		// need their place in the sorted first part.
		h := s.work[k][:s.firstN[k]]
		sortFacts(h[sort.Search(len(h), func(i int) bool { return h[i].pos > before }):])
	}
	f.claimsAndChanges(added, touched)
	for k := range touched {
		var later []factAt
		for _, y := range s.work[k] {
			if y.pos > before {
				later = append(later, y)
			}
		}
		f.history[k] = append(f.history[k], sortFacts(later)...)
	}
	subjects := map[string]bool{}
	for _, st := range added {
		subjects[st.subject] = true
	}
	for subj := range subjects {
		ps := f.bySubject[subj]
		if len(ps) == 0 {
			continue
		}
		n := 0
		for n < len(ps) && ps[n] <= before {
			n++
		}
		f.bySubject[subj] = append(ps[:n], sortUnique(slices.Clone(ps[n:]))...)
	}
	s.settled = len(f.stmts)
	s.extended++
	return true
}

// firstPass files a statement's facts as its frames read them (fs): by
// turn, by subject, as values stated, and in the history (work) after the
// facts filed before it; touched, if set, collects the histories changed.
func (f *facts) firstPass(st statement, fs []fact, touched map[string]bool) {
	s := &f.settle
	s.maxPos = max(s.maxPos, st.pos)
	if len(st.cands) > 0 && named(st.subject) != "" {
		for _, c := range st.cands {
			s.candValues[c.value] = true
		}
	}
	if len(fs) == 0 {
		return
	}
	f.bySubject[st.subject] = append(f.bySubject[st.subject], st.pos)
	f.byTurn[st.pos] = append(f.byTurn[st.pos], fs...)
	for _, x := range fs {
		k := historyKey(x)
		if len(s.work[k]) == 0 {
			// Only here does a history begin: a claim or a change adds to
			// one that holds the value it replaces.
			f.clustersOf[x.subject] = append(f.clustersOf[x.subject], x.cluster)
		}
		s.work[k] = slices.Insert(s.work[k], s.firstN[k], factAt{pos: st.pos, value: x.value})
		s.firstN[k]++
		if touched != nil {
			touched[k] = true
		}
		f.stated[x.value] = true
		if f.values[x.cluster] == nil {
			f.values[x.cluster] = map[uint64]bool{}
		}
		f.values[x.cluster][x.value] = true
	}
}

// claimsAndChanges reads stmts' claims and changes (see claims and
// changes) in position order, each against the history before it, and
// files them; touched, if set, collects the histories changed.
func (f *facts) claimsAndChanges(stmts []statement, touched map[string]bool) {
	s := &f.settle
	s.passing = true
	defer func() { s.passing = false }()
	// Updates that name the old value and the new one in one sentence
	// ("S swapped the banjo for the cello") repeat no frame; read them in
	// position order, each against the facts before it.
	order := make([]int, len(stmts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return stmts[order[i]].pos < stmts[order[j]].pos })
	for _, i := range order {
		st := stmts[i]
		for _, x := range f.claims(st, f.byTurn[st.pos]) {
			f.bySubject[x.subject] = append(f.bySubject[x.subject], st.pos)
			f.byTurn[st.pos] = append(f.byTurn[st.pos], x)
			k := historyKey(x)
			s.work[k] = append(s.work[k], factAt{pos: st.pos, value: x.value})
			if touched != nil {
				touched[k] = true
			}
		}
		for _, x := range f.changes(st, f.byTurn[st.pos]) {
			f.bySubject[st.subject] = append(f.bySubject[st.subject], st.pos)
			f.byTurn[st.pos] = withChange(f.byTurn[st.pos], x)
			k := historyKey(x)
			h, first := s.work[k][:0], s.firstN[k]
			for i, y := range s.work[k] {
				switch {
				case y.pos != st.pos: // not the frame's reading of the old value
					h = append(h, y)
				case i < first:
					s.firstN[k]--
				}
			}
			s.work[k] = append(h, factAt{pos: st.pos, value: x.value})
			if touched != nil {
				touched[k] = true
			}
		}
	}
}

// sortFacts orders h fully, position then value (statements are kept in no
// particular order: a re-read walks a map), and returns it.
func sortFacts(h []factAt) []factAt {
	sort.Slice(h, func(i, j int) bool {
		if h[i].pos != h[j].pos {
			return h[i].pos < h[j].pos
		}
		return h[i].value < h[j].value
	})
	return h
}
