package memory

// Supersession: a later statement about the same thing replaces an earlier
// one. "The same thing" is a (subject, cluster) pair from the fact analysis;
// "later" is a higher position among the candidates (below the cut) or any
// statement in the window, which always comes after the evicted turns it
// could replace.

// windowFacts reads the window's turns against the collection's clusters.
func (f *facts) windowFacts(window []Turn) map[string][]factAt {
	out := map[string][]factAt{}
	for _, t := range window {
		for _, s := range sentences(t.Text) {
			st, ok := f.analyse(t.Pos, t.Role, s, false)
			if !ok {
				continue
			}
			for _, x := range f.factsOf(st) {
				k := historyKey(x)
				out[k] = append(out[k], factAt{pos: t.Pos, value: x.value})
			}
		}
	}
	return out
}

// superseded reports whether every fact of the turn at pos is replaced by a
// later fact with another value, stated by a turn the ask retrieved too
// (among) or in the window. A turn without facts is never superseded; nor is
// one whose replacement the packet would not carry: an old statement is
// dropped only in favour of the newer one the window will hold.
func (f *facts) superseded(pos int, among map[int]bool, window map[string][]factAt) bool {
	fs := f.byTurn[pos]
	if len(fs) == 0 {
		return false
	}
	for _, x := range fs {
		k := historyKey(x)
		if !replaced(x.value, pos, among, f.history[k]) && !replaced(x.value, pos, nil, window[k]) {
			return false
		}
	}
	return true
}

// replaced: some fact after pos (at a position in among, if set) has
// another value.
func replaced(value uint64, pos int, among map[int]bool, later []factAt) bool {
	for _, y := range later {
		if y.pos > pos && (among == nil || among[y.pos]) && y.value != value {
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
