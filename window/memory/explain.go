package memory

// Miss says why a held turn is not among an ask's hits (Index.Explain), so
// that an evaluation can say where recall is lost.
type Miss int

// The reasons a turn is not in a packet.
const (
	// MissNone: the turn is a hit.
	MissNone Miss = iota
	// MissNotHeld: the memory does not hold the turn (not stored yet).
	MissNotHeld
	// MissNotRetrieved: the search did not rank it: no match with the
	// ask, below the cutoff, or held back by the chance gate or because
	// the window already answers the ask.
	MissNotRetrieved
	// MissGated: it matches the ask, but the ask got no lexical hits: no
	// turn matches it beyond chance, or the window's last exchange
	// answers it as well as the memory could (see docs/memory.md).
	MissGated
	// MissCut: ranked, but the packet's K or token room left it out.
	MissCut
	// MissStale: ranked, but left out as superseded by a later statement.
	MissStale
	// MissDuplicate: ranked, but its text is already in the window or in
	// the packet.
	MissDuplicate
	// MissInWindow: the window carries the turn itself.
	MissInWindow
)

// String names the reason as a table column does.
func (m Miss) String() string {
	switch m {
	case MissNone:
		return "hit"
	case MissNotHeld:
		return "not in memory yet"
	case MissNotRetrieved:
		return "not retrieved"
	case MissGated:
		return "gated"
	case MissCut:
		return "cut by the cap"
	case MissStale:
		return "dropped as stale"
	case MissDuplicate:
		return "duplicate text"
	case MissInWindow:
		return "in the window"
	}
	return "unknown"
}

// Explain runs the search for q and returns, for each position, why the
// turn there is or is not among the hits Search returns for q. It changes
// nothing. Safe for concurrent use.
func (x *Index) Explain(q Query, positions []int) []Miss {
	x.mu.Lock()
	defer x.mu.Unlock()
	why := map[int]Miss{}
	gated := map[int]bool{} // matched, but the ask got no lexical hits
	limit := x.limit(q.Before)
	if limit > 0 {
		x.facts.finish()
		if m := x.match(q, limit); m.best > 0 {
			x.pickNoted(q, m, x.rank(m, limit), func(pos int, r Miss) {
				if _, ok := why[pos]; !ok {
					why[pos] = r
				}
			})
			if m.inView || !m.beyond {
				for _, d := range m.scores.touched {
					gated[x.turns[d].Pos] = m.scores.get(d) > 0
				}
			}
		}
	}
	out := make([]Miss, len(positions))
	for i, pos := range positions {
		r, ok := why[pos]
		switch d, held := x.byPos[pos]; {
		case ok:
			out[i] = r
		case !held || d < 0 || (q.Before > 0 && pos >= q.Before):
			out[i] = MissNotHeld
		case gated[pos]:
			out[i] = MissGated
		default:
			out[i] = MissNotRetrieved
		}
	}
	return out
}
