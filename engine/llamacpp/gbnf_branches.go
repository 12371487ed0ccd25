package llamacpp

import "kvwin/engine"

// checkBranches refuses a recursion that a text can enter at two places at
// once. llama.cpp keeps one parse stack per way the text read so far can
// continue, and a reference that is not the last item of its sequence
// pushes the position after it onto the stack. When two such references to
// rules of one recursion can both read the next character, as in
// x ::= "." x? x? "b" (after ".", either x? can take the next "."), the
// stacks split in two at every level the text goes down, and a text of n
// characters keeps 2^n of them. FuzzRawGrammar found one whose eight
// characters took 27 s; x ::= . x* x* x* x* root takes 10 s. With one such
// reference, or the second in the last place, the stacks grow with the
// depth only: llama.cpp replaces the frame of a last item instead of
// pushing one.
//
// The rule: in a rule on a cycle of references, no two references to
// rules of that cycle that push a frame (not the last item of their
// sequence, or repeated) may be reached from one position (through items
// that can be empty, or as the first items of two alternatives) when both
// can start with the same character. Two that start with literals neither
// of which is a prefix of the other are told apart (the optional
// properties of a recursive object): one of the two stacks ends within the
// literals, before either can go down again. Characters are compared
// exactly below 128; all others are one class, and a negated class is any
// character.
func (p *gParser) checkBranches(m *gMeasures) error {
	n := len(p.rules)
	succ := make([][]int, n)
	self := make([]bool, n)
	for r, rule := range p.rules {
		for _, alt := range rule.alts {
			for _, it := range alt {
				if it.rule >= 0 {
					succ[r] = append(succ[r], it.rule)
					self[r] = self[r] || it.rule == r
				}
			}
		}
	}
	comp := sccs(succ)
	size := make([]int, n)
	for _, c := range comp {
		size[c]++
	}
	heads := p.ruleHeads(m)
	var set headSet
	for r, rule := range p.rules {
		if size[comp[r]] < 2 && !self[r] {
			continue // on no cycle
		}
		head := func(alt []gItem, j int) (gHead, bool) {
			it := alt[j]
			if it.rule < 0 || comp[it.rule] != comp[r] || (j == len(alt)-1 && it.max >= 0 && it.max <= 1) {
				return gHead{}, false
			}
			return heads[it.rule], true
		}
		refuse := func(j int, alt []gItem) error {
			return engine.Invalid("the grammar's rule %q can go down its recursion through two references that start with the same character (as in x ::= \".\" x? x? \"b\"): llama.cpp's parse stacks double with every level the text goes down; make the choices start with different characters, or recurse in one place", p.rules[alt[j].rule].name)
		}
		// Within each sequence: the references reachable from each
		// position, walking back from its end.
		for _, alt := range rule.alts {
			set.reset()
			for j := len(alt) - 1; j >= 0; j-- {
				if !m.nullable(alt[j]) {
					set.reset()
				}
				if h, ok := head(alt, j); ok && set.add(h) {
					return refuse(j, alt)
				}
			}
		}
		// Across alternatives: the references each can start with.
		set.reset()
		for _, alt := range rule.alts {
			for j := range alt {
				if h, ok := head(alt, j); ok && set.add(h) {
					return refuse(j, alt)
				}
				if !m.nullable(alt[j]) {
					break
				}
			}
		}
	}
	return nil
}

// maxLead bounds the literal prefix kept of a rule's texts.
const maxLead = 32

// gHead is what a terminal or a rule's texts can start with: the set of
// first characters, and the prefix every text of it shares when that is
// a known literal (empty otherwise).
type gHead struct {
	first charSet
	lead  []byte
}

// charSet holds characters below 128 exactly and all others as bit 128.
type charSet [3]uint64

func (s *charSet) add(lo, hi rune) {
	for c := max(lo, 0); c <= hi && c < 128; c++ {
		s[c>>6] |= 1 << (c & 63)
	}
	if hi >= 128 || lo < 0 || hi < 0 { // a \U escape past int32 reads negative
		s[2] |= 1
	}
}

func (s charSet) meets(o charSet) bool {
	return s[0]&o[0] != 0 || s[1]&o[1] != 0 || s[2]&o[2] != 0
}

func (s *charSet) union(o charSet) { s[0], s[1], s[2] = s[0]|o[0], s[1]|o[1], s[2]|o[2] }

// anyChar is the head of ".", a negated class, and what is not known.
var anyChar = gHead{first: charSet{^uint64(0), ^uint64(0), 1}}

// headAt reads again the head of the terminal the parser read at source
// offset off (a literal or a class; gItem.term is off + 1): kept as an
// offset, a terminal costs the parse nothing more, where a head apiece
// made the largest grammar's parse several times its size.
func (p *gParser) headAt(off int) gHead {
	q := &gParser{src: p.src, pos: off}
	var h gHead
	var err error
	if p.src[off] == '"' {
		_, err = q.literal(&h)
	} else {
		_, err = q.charClass(&h)
	}
	if err != nil {
		return anyChar // not reached: the text parsed before
	}
	return h
}

// ruleHeads computes each rule's head. A rule's first characters are its
// own leading terminals' and those of the rules it can start with (through
// items that can be empty); rules that can start with each other (a cycle
// that is no left recursion, through a rule that starts with a character
// elsewhere) share one set. So the sets are computed per strongly connected
// component of the can-start-with graph, each after the components it
// reaches (Tarjan numbers those first): linear in the grammar. Leads are
// computed once, in the order analyze's walk settled the rules; a rule not
// settled yet counts as having none, which can only find more conflicts.
func (p *gParser) ruleHeads(m *gMeasures) []gHead {
	heads := make([]gHead, len(p.rules))
	termHead := func(it gItem) gHead {
		switch {
		case it.chars == 0:
			return gHead{} // matches the empty text only
		case it.term > 0:
			return p.headAt(it.term - 1)
		}
		return anyChar
	}
	itemHead := func(it gItem) gHead {
		if it.rule >= 0 {
			return heads[it.rule]
		}
		return termHead(it)
	}
	for _, r := range m.order {
		var lead []byte
		for a, alt := range p.rules[r].alts {
			var l []byte
			if len(alt) > 0 && !m.nullable(alt[0]) {
				l = itemHead(alt[0]).lead
			}
			if a == 0 {
				lead = l
			} else {
				lead = lead[:commonPrefix(lead, l)]
			}
		}
		heads[r].lead = lead
	}
	starts := make([][]int, len(p.rules)) // the rules each can start with
	for r, rule := range p.rules {
		for _, alt := range rule.alts {
			for _, it := range alt {
				if it.rule >= 0 {
					starts[r] = append(starts[r], it.rule)
				}
				if !m.nullable(it) {
					break
				}
			}
		}
	}
	comp := sccs(starts)
	byComp := make([][]int, len(p.rules))
	for r, c := range comp {
		byComp[c] = append(byComp[c], r)
	}
	for c, members := range byComp {
		var first charSet
		for _, r := range members {
			for _, alt := range p.rules[r].alts {
				for _, it := range alt {
					switch {
					case it.rule < 0:
						first.union(termHead(it).first)
					case comp[it.rule] != c:
						first.union(heads[it.rule].first) // numbered before c
					}
					if !m.nullable(it) {
						break
					}
				}
			}
		}
		for _, r := range members {
			heads[r].first = first
		}
	}
	return heads
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// headSet holds the heads reachable from one position and tells whether a
// new one can start with a character one of them can: leads are told apart
// when neither is a prefix of the other.
type headSet struct {
	any      charSet             // the first characters of every head
	unled    charSet             // the first characters of heads without a lead
	leads    map[string]struct{} // the leads
	prefixes map[string]struct{} // every prefix of every lead
}

func (s *headSet) reset() {
	s.any, s.unled = charSet{}, charSet{}
	if len(s.leads) > 0 { // clearing a map costs its capacity
		clear(s.leads)
		clear(s.prefixes)
	}
}

// add adds h and reports whether it meets a head already held.
func (s *headSet) add(h gHead) bool {
	if len(h.lead) == 0 {
		if h.first.meets(s.any) {
			return true
		}
	} else {
		if h.first.meets(s.unled) {
			return true
		}
		if _, ok := s.prefixes[string(h.lead)]; ok {
			return true // h's lead is a prefix of one held
		}
		for i := 1; i <= len(h.lead); i++ {
			if _, ok := s.leads[string(h.lead[:i])]; ok {
				return true // one held is a prefix of h's lead
			}
		}
	}
	s.any.union(h.first)
	if len(h.lead) == 0 {
		s.unled.union(h.first)
		return false
	}
	if s.leads == nil {
		s.leads, s.prefixes = map[string]struct{}{}, map[string]struct{}{}
	}
	s.leads[string(h.lead)] = struct{}{}
	for i := 1; i <= len(h.lead); i++ {
		s.prefixes[string(h.lead[:i])] = struct{}{}
	}
	return false
}
