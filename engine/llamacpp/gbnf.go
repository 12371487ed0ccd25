package llamacpp

import (
	"container/heap"
	"fmt"
	"unicode/utf8"

	"kvwin/engine"
)

// checkGrammar reads a GBNF grammar the way llama.cpp's parser does, in Go
// and in time linear in its size, before llama.cpp sees it: llama.cpp's
// parser and its grammar engine recurse on nesting (a grammar of 100,000
// nested parentheses overflowed the C stack and killed the process), expand
// every {m,n} repetition into rules (memory grows with the count), and keep
// one stack per way the text read so far can continue, deduplicated in
// quadratic time (an ambiguous grammar stalls every token). Each limit
// broken is an engine.Invalid error naming it. On success it returns the
// length in characters of the shortest text the grammar accepts, or -1 when
// it accepts no finite text (a required recursion).
func checkGrammar(src string) (shortest int, err error) {
	if len(src) > maxGrammarBytes {
		return 0, engine.Invalid("the grammar is %d bytes; the limit on grammar size is %d", len(src), maxGrammarBytes)
	}
	for i := 0; i < len(src); i++ {
		if src[i] == 0 {
			return 0, engine.Invalid("the grammar contains a NUL byte at offset %d", i)
		}
	}
	p := &gParser{src: src, names: map[string]int{}}
	if err := p.parse(); err != nil {
		return 0, err
	}
	return p.analyze()
}

// gItem is one symbol of a sequence with its repetition.
type gItem struct {
	rule  int // referenced rule, or -1 for a terminal
	chars int // a terminal's length in characters
	min   int
	max   int // -1: unbounded
	term  int // a terminal's offset in the source + 1 (0: any character; see headAt)
}

type gRule struct {
	name    string
	alts    [][]gItem
	defined bool
}

type gParser struct {
	src      string
	pos      int
	names    map[string]int
	rules    []gRule
	elements int // llama.cpp grammar elements after expansion, so far
}

func (p *gParser) fail(format string, args ...any) error {
	return engine.Invalid("the grammar does not parse (GBNF, root rule \"root\") at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *gParser) ruleID(name string) int {
	if id, ok := p.names[name]; ok {
		return id
	}
	p.rules = append(p.rules, gRule{name: name})
	p.names[name] = len(p.rules) - 1
	return len(p.rules) - 1
}

func (p *gParser) newRule(name string) int {
	p.rules = append(p.rules, gRule{name: name, defined: true})
	return len(p.rules) - 1
}

func (p *gParser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *gParser) space(newlineOK bool) {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\r' && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == ' ' || c == '\t' || (newlineOK && (c == '\r' || c == '\n')):
			p.pos++
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || '0' <= c && c <= '9'
}

func (p *gParser) name() (string, error) {
	start := p.pos
	for p.pos < len(p.src) && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		return "", p.fail("expecting a rule name")
	}
	return p.src[start:p.pos], nil
}

// char reads one character of a literal or a class, escapes included,
// and returns it.
func (p *gParser) char() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.fail("unexpected end of input")
	}
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.fail("unexpected end of input")
	}
	hex, r := 0, rune(p.src[p.pos+1])
	switch p.src[p.pos+1] {
	case 'x':
		hex = 2
	case 'u':
		hex = 4
	case 'U':
		hex = 8
	case 't':
		r = '\t'
	case 'r':
		r = '\r'
	case 'n':
		r = '\n'
	case '\\', '"', '[', ']':
	default:
		return 0, p.fail("unknown escape")
	}
	p.pos += 2
	if hex > 0 {
		r = 0
	}
	for range hex {
		c := p.peek()
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.fail("expecting %d hex digits", hex)
		}
		r = r<<4 | rune(d)
		p.pos++
	}
	return r, nil
}

func (p *gParser) parse() error {
	p.space(true)
	for p.pos < len(p.src) {
		name, err := p.name()
		if err != nil {
			return err
		}
		id := p.ruleID(name)
		p.space(false)
		if len(p.src)-p.pos < 3 || p.src[p.pos:p.pos+3] != "::=" {
			return p.fail("expecting ::=")
		}
		p.pos += 3
		p.space(true)
		alts, err := p.alternates(name, false, 0)
		if err != nil {
			return err
		}
		p.rules[id].alts, p.rules[id].defined = alts, true
		switch p.peek() {
		case '\r':
			p.pos++
			if p.peek() == '\n' {
				p.pos++
			}
		case '\n':
			p.pos++
		case 0:
		default:
			return p.fail("expecting newline or end")
		}
		p.space(true)
	}
	if _, ok := p.names["root"]; !ok {
		return p.fail("no rule named root")
	}
	return nil
}

func (p *gParser) alternates(name string, nested bool, depth int) ([][]gItem, error) {
	if depth > maxGrammarNesting {
		return nil, engine.Invalid("the grammar nests groups more than %d deep (the limit on grammar nesting)", maxGrammarNesting)
	}
	var alts [][]gItem
	for {
		seq, err := p.sequence(name, nested, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		p.elements += 1
		if p.peek() != '|' {
			return alts, nil
		}
		p.pos++
		p.space(true)
	}
}

func (p *gParser) sequence(name string, nested bool, depth int) ([]gItem, error) {
	var seq []gItem
	last := -1 // index in seq of the symbol a quantifier applies to
	for p.pos < len(p.src) {
		var it gItem
		var err error
		c := p.src[p.pos]
		switch {
		case c == '"':
			it, err = p.literal(nil)
		case c == '[':
			it, err = p.charClass(nil)
		case isWordChar(c):
			n, _ := p.name()
			it = gItem{rule: p.ruleID(n), min: 1, max: 1}
			p.elements++
		case c == '(':
			it, err = p.group(name, depth)
		case c == '.':
			p.pos++
			it = gItem{rule: -1, chars: 1, min: 1, max: 1}
			p.elements++
		case c == '*' || c == '+' || c == '?' || c == '{':
			// An empty literal or class is no element to llama.cpp, so
			// nothing a quantifier could apply to.
			if last != len(seq)-1 || last < 0 || (seq[last].rule < 0 && seq[last].chars == 0) {
				return nil, p.fail("expecting an item before */+/?/{")
			}
			lo, hi, err := p.quantifier(nested)
			if err != nil {
				return nil, err
			}
			if err := p.repeat(&seq[last], lo, hi, name); err != nil {
				return nil, err
			}
			p.space(nested)
			continue
		default:
			return seq, nil
		}
		if err != nil {
			return nil, err
		}
		seq = append(seq, it)
		last = len(seq) - 1
		p.space(nested)
	}
	return seq, nil
}

// literal reads a "quoted" terminal; with h, also its head (headAt).
func (p *gParser) literal(h *gHead) (gItem, error) {
	start := p.pos
	p.pos++
	n := 0
	for p.peek() != '"' {
		r, err := p.char()
		if err != nil {
			return gItem{}, err
		}
		if h != nil {
			if n == 0 {
				h.first.add(r, r)
			}
			if len(h.lead) < maxLead {
				h.lead = utf8.AppendRune(h.lead, r)
			}
		}
		n++
	}
	p.pos++
	p.elements += n
	return gItem{rule: -1, chars: n, min: 1, max: 1, term: start + 1}, nil
}

// charClass reads a [character class], one character long; llama.cpp
// writes an empty one, [] or [^], as nothing: it matches the empty text.
// With h, it also reads the class's characters into h (headAt).
func (p *gParser) charClass(h *gHead) (gItem, error) {
	start := p.pos
	p.pos++
	negated := p.peek() == '^'
	if negated {
		p.pos++
	}
	if p.peek() == ']' {
		p.pos++
		return gItem{rule: -1, chars: 0, min: 1, max: 1}, nil
	}
	for p.peek() != ']' {
		lo, err := p.char()
		if err != nil {
			return gItem{}, err
		}
		hi := lo
		p.elements++
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return gItem{}, err
			}
			p.elements++
		}
		if h != nil {
			h.first.add(lo, hi)
		}
	}
	p.pos++
	if negated {
		return gItem{rule: -1, chars: 1, min: 1, max: 1}, nil // any character, near enough
	}
	return gItem{rule: -1, chars: 1, min: 1, max: 1, term: start + 1}, nil
}

// group reads a (parenthesised group) into a rule of its own.
func (p *gParser) group(name string, depth int) (gItem, error) {
	p.pos++
	p.space(true)
	id := p.newRule(name)
	alts, err := p.alternates(name, true, depth+1)
	if err != nil {
		return gItem{}, err
	}
	p.rules[id].alts = alts
	if p.peek() != ')' {
		return gItem{}, p.fail("expecting )")
	}
	p.pos++
	p.elements++
	return gItem{rule: id, min: 1, max: 1}, nil
}

// quantifier reads *, +, ? or {m}, {m,} or {m,n} as the bounds lo and hi
// (-1: unbounded).
func (p *gParser) quantifier(nested bool) (lo, hi int, err error) {
	c := p.src[p.pos]
	p.pos++
	lo, hi = 0, -1
	switch c {
	case '+':
		lo = 1
	case '?':
		hi = 1
	case '{':
		p.space(nested)
		if lo, err = p.count(); err != nil {
			return 0, 0, err
		}
		p.space(nested)
		switch p.peek() {
		case '}':
			hi = lo
		case ',':
			p.pos++
			p.space(nested)
			if c := p.peek(); '0' <= c && c <= '9' {
				if hi, err = p.count(); err != nil {
					return 0, 0, err
				}
				p.space(nested)
			}
			if p.peek() != '}' {
				return 0, 0, p.fail("expecting }")
			}
		default:
			return 0, 0, p.fail("expecting , or }")
		}
		p.pos++
	}
	return lo, hi, nil
}

// count reads a repetition count, at most maxRepeat.
func (p *gParser) count() (int, error) {
	start, n := p.pos, 0
	for c := p.peek(); '0' <= c && c <= '9'; c = p.peek() {
		n = n*10 + int(c-'0')
		if n > maxRepeat {
			return 0, engine.Invalid("a grammar repetition count (%s…) exceeds %d (the limit on repetition counts)", p.src[start:p.pos+1], maxRepeat)
		}
		p.pos++
	}
	if p.pos == start {
		return 0, p.fail("expecting an integer")
	}
	return n, nil
}

// repeat applies {lo,hi} to an item as llama.cpp does: lo copies and hi-lo
// optional rules, each a copy of the item. A quantifier on a quantified
// item applies to the expansion: the item is wrapped in a rule first.
func (p *gParser) repeat(it *gItem, lo, hi int, name string) error {
	if hi >= 0 && hi < lo {
		return p.fail("repetition {%d,%d} has its maximum below its minimum", lo, hi)
	}
	if it.min != 1 || it.max != 1 {
		id := p.newRule(name)
		p.rules[id].alts = [][]gItem{{*it}}
		*it = gItem{rule: id, min: 1, max: 1}
	}
	size := 1
	if it.rule < 0 {
		size = max(1, it.chars)
	}
	opt := 1
	if hi >= 0 {
		opt = hi - lo
	}
	p.elements += size*max(lo-1, 0) + opt*(size+3)
	if p.elements > maxGrammarElements {
		return engine.Invalid("the grammar expands to more than %d elements (the limit on expanded grammar size)", maxGrammarElements)
	}
	it.min, it.max = lo, hi
	return nil
}

// saturating arithmetic: grammar measures are capped well above every limit.
const gInf = 1 << 40

func sadd(a, b int) int { return min(a+b, gInf) }
func smul(a, b int) int {
	if a == 0 || b == 0 {
		return 0
	}
	if a >= gInf/b {
		return gInf
	}
	return a * b
}

// analyze checks the parsed grammar: every rule defined, no left
// recursion, the recursion depth and the number of parse stacks llama.cpp
// would keep within limits; and computes the shortest accepted text.
func (p *gParser) analyze() (int, error) {
	if p.elements > maxGrammarElements {
		return 0, engine.Invalid("the grammar expands to more than %d elements (the limit on expanded grammar size)", maxGrammarElements)
	}
	for _, r := range p.rules {
		if !r.defined {
			return 0, engine.Invalid("the grammar does not parse (GBNF, root rule \"root\"): rule %q is used but not defined", r.name)
		}
	}
	n := len(p.rules)
	m := &gMeasures{short: p.shortest(), depth: make([]int, n), width: make([]int, n), states: make([]int, n), ways: make([]int, n),
		nest: make([]int, n), mark: make([]uint8, n)}
	for root := range n {
		if m.mark[root] != gUnvisited {
			continue
		}
		if err := p.walk(m, root); err != nil {
			return 0, err
		}
	}
	if err := p.checkReturns(m); err != nil {
		return 0, err
	}
	root := m.short[p.names["root"]]
	if root >= gInf {
		return -1, nil
	}
	for r, short := range m.short {
		// A rule that can never finish under a root that can: a text
		// that enters it never completes, and the measures above assume
		// finite rules, so its stacks go uncounted (a fuzzed
		// root ::= "b" | x, x ::= . x*?…? x: 17 s for eight characters).
		if short >= gInf {
			return 0, engine.Invalid("the grammar's rule %q accepts no finite text (it requires itself without end), so a text that enters it could never finish", p.rules[r].name)
		}
	}
	if err := p.checkBranches(m); err != nil { // gbnf_branches.go
		return 0, err
	}
	return root, nil
}

// checkRawGrammar is checkGrammar for a client's own GBNF grammar, which
// must also accept some finite text: one whose root requires itself without
// end could never finish an answer, and llama.cpp's parse stacks multiply
// with every level of that recursion (a fuzzed eight-character generation
// took 17 s). An output format's grammar is refused for it with its own
// words instead (checkBudget).
func checkRawGrammar(src string) error {
	shortest, err := checkGrammar(src)
	if err == nil && shortest < 0 {
		err = engine.Invalid("the grammar accepts no finite text (its root requires a rule that requires itself without end), so no answer could ever finish")
	}
	return err
}

// gMeasures are what analyze measures of each rule. depth: how deep
// llama.cpp's advance recursion goes entering a rule (through every item
// that can be empty, to the first that cannot); width: how many stacks it
// can produce; states: how many positions the rule's expansion has (a
// skippable repeated item can leave any of them live at once).
type gMeasures struct {
	short                []int // the shortest text of each rule (see shortest)
	depth, width, states []int
	// ways: how many ways the rule matches the empty text. llama.cpp's
	// stack advance walks each of them (it removes duplicate stacks only
	// at the end), so (|){0,100} is 2^101 walks: a hang, not an error.
	ways []int
	// nest: how deep repetitions nest at the rule's end (through items
	// that can be empty), as in ((x+)+)+. llama.cpp copies a repeated
	// sequence into each repetition's rule, and the stacks it keeps after
	// a character are one per way the nested repetitions can be each
	// continued or ended: 2^nest (measured: each level about doubles a
	// token's grammar work, 0.08 ms at 6 levels, 0.44 ms at 8; at 20
	// levels the eighth character took 30 s).
	nest     []int
	mark     []uint8 // gUnvisited, gInProgress or gDone
	maxWidth int     // the widest seen so far
	order    []int   // the rules in the order settled
}

// The marks of analyze's depth-first walk.
const (
	gUnvisited = iota
	gInProgress
	gDone
)

func (m *gMeasures) nullable(it gItem) bool {
	return it.min == 0 || (it.rule >= 0 && m.short[it.rule] == 0) || (it.rule < 0 && it.chars == 0)
}

// bodyEmpty reports whether one repeat of it can match the empty text
// (its repetition count aside).
func (m *gMeasures) bodyEmpty(it gItem) bool {
	return (it.rule >= 0 && m.short[it.rule] == 0) || (it.rule < 0 && it.chars == 0)
}

// itemWays is how many ways it matches the empty text: llama.cpp writes
// x{lo,hi} as lo copies of x then hi-lo nested optionals, each of which
// is skipped or taken (one of x's own empty ways) again.
func (m *gMeasures) itemWays(it gItem) int {
	if !m.nullable(it) {
		return 0
	}
	if !m.bodyEmpty(it) {
		return 1 // only by skipping it (min 0)
	}
	e := 1
	if it.rule >= 0 {
		e = max(m.ways[it.rule], 1)
	}
	if e == 1 {
		return 1 + max(reps(it)-it.min, 0)
	}
	v := 1
	for range max(it.max-it.min, 0) {
		if v = sadd(1, smul(e, v)); v >= gInf {
			break
		}
	}
	for range it.min {
		if v = smul(e, v); v >= gInf {
			break
		}
	}
	return v
}

// itemNest is how deep repetitions nest in it: its own, if repeated, on
// those at its rule's end.
func (m *gMeasures) itemNest(it gItem) int {
	n := 0
	if it.rule >= 0 {
		n = m.nest[it.rule]
	}
	if it.max < 0 || it.max > 1 {
		n++
	}
	return n
}

func reps(it gItem) int {
	if it.max < 0 {
		return max(it.min, 1)
	}
	return max(it.max, 1)
}

// itemDW is an item's depth and width, given the referenced rule's.
func (m *gMeasures) itemDW(it gItem) (d, w int) {
	if it.rule < 0 {
		return 0, 1
	}
	r := it.rule
	if m.short[r] == 0 && reps(it) > 1 {
		// every position of every repeat can be live at once
		return smul(reps(it), m.depth[r]+1), smul(reps(it), m.states[r])
	}
	return m.depth[r] + 1, m.width[r]
}

// walk measures root and every rule it references not yet measured,
// depth first, each after the rules it references.
func (p *gParser) walk(m *gMeasures, root int) error {
	stack := []gFrame{{rule: root}}
	m.mark[root] = gInProgress
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		next, err := p.next(m, f, stack)
		if err != nil {
			return err
		}
		if next >= 0 {
			m.mark[next] = gInProgress
			stack = append(stack, gFrame{rule: next})
			continue
		}
		if err := m.settle(f.rule, p.rules[f.rule]); err != nil {
			return err
		}
		stack = stack[:len(stack)-1]
	}
	return nil
}

// next moves f on to the next referenced rule not yet measured, leading
// items (for depth and width) and every item (states), and returns it; -1
// when f's rule has none left.
func (p *gParser) next(m *gMeasures, f *gFrame, stack []gFrame) (int, error) {
	r := &p.rules[f.rule]
	for ; f.alt < len(r.alts); f.alt, f.item = f.alt+1, 0 {
		alt := r.alts[f.alt]
		for f.item < len(alt) {
			it := alt[f.item]
			f.item++
			if it.rule < 0 || m.mark[it.rule] == gDone {
				continue
			}
			if m.mark[it.rule] == gInProgress {
				// A cycle. Through leading items that can be
				// empty it is left recursion, which llama.cpp
				// refuses; elsewhere it is ordinary recursion.
				if p.leading(it.rule, m.short, stack) {
					return -1, engine.Invalid("the grammar does not parse (GBNF, root rule \"root\"): rule %q is left-recursive", p.rules[it.rule].name)
				}
				if p.repeatsEmpty(it.rule, m.short, stack) {
					return -1, engine.Invalid("the grammar repeats, on a cycle through rule %q, an item that can match the empty text (as in root ::= (\"a\" root{0,9})?): every repeat can stay live at once at every level of the recursion, so the ways to match grow without bound; repeat a non-empty item or recurse without the repetition", p.rules[it.rule].name)
				}
				continue
			}
			return it.rule, nil
		}
	}
	return -1, nil
}

// settle measures the rule numbered rule, every rule it references being measured (or on
// the stack: recursion counts as one level and one state), and checks the
// limits.
func (m *gMeasures) settle(rule int, r gRule) error {
	d, w, s, ways, nest := 0, 0, 0, 0, 0
	for _, alt := range r.alts {
		ad, aw, aways := 0, 0, 1
		sufD, sufW := 0, 0
		for i := len(alt) - 1; i >= 0; i-- {
			if alt[i].max < 0 && m.bodyEmpty(alt[i]) {
				// llama.cpp writes x* as `rep ::= x rep | ""`: with x
				// able to match nothing, rep is left-recursive, and its
				// grammar init recurses until the stack overflows.
				return engine.Invalid("the grammar repeats without bound an item that can match the empty text (as in (\"a\"?)*), which llama.cpp cannot expand: bound the repetition or make the item non-empty")
			}
			in := m.itemNest(alt[i])
			m.maxWidth = max(m.maxWidth, 1<<min(in, 40))
			if aways > 0 {
				// Every item after it can be empty: it is at the
				// alternative's end, and its nesting is the rule's.
				nest = max(nest, in)
			}
			id, iw := m.itemDW(alt[i])
			iways := m.itemWays(alt[i])
			aways = smul(aways, iways)
			// The ways the rest of the alternative can be empty, which
			// llama.cpp walks once the item before it is read.
			m.maxWidth = max(m.maxWidth, aways)
			if iways > 0 {
				sufD, sufW = sadd(id, sufD), sadd(iw, smul(iways, sufW))
			} else {
				sufD, sufW = id, iw
			}
			m.maxWidth = max(m.maxWidth, sufW)
			ad, aw = sufD, sufW
			if alt[i].rule >= 0 {
				s = sadd(s, smul(reps(alt[i]), max(m.states[alt[i].rule], 1)))
			} else {
				s = sadd(s, reps(alt[i]))
			}
		}
		d, w, ways = max(d, ad), sadd(w, max(aw, 1)), sadd(ways, aways)
	}
	m.depth[rule], m.width[rule], m.states[rule], m.ways[rule], m.nest[rule] = d, w, max(s, 1), ways, nest
	m.maxWidth = max(m.maxWidth, w, ways)
	m.mark[rule] = gDone
	m.order = append(m.order, rule)
	if d > maxGrammarDepth {
		return engine.Invalid("the grammar's rules nest more than %d deep through items that can be empty or start a rule (the limit on grammar nesting)", maxGrammarDepth)
	}
	if m.maxWidth > maxGrammarWidth {
		return engine.Invalid("the grammar can be matched more than %d ways at once (the limit on grammar ambiguity: an alternation of that many branches, a repetition of an item that can be empty, or repetitions nested more than 8 deep at an item's end, as in ((x+)+)+)", maxGrammarWidth)
	}
	return nil
}

// gFrame is a step of analyze's depth-first walk: the rule, and the
// alternative and item it goes on from.
type gFrame struct{ rule, alt, item int }

// cycleOf returns the frames of the DFS stack from rule to's latest frame
// to the top: the cycle a walk that reaches to again has gone round; false
// if to is not on the stack.
func cycleOf(to int, stack []gFrame) ([]gFrame, bool) {
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].rule == to {
			return stack[i:], true
		}
	}
	return nil, false
}

// leading reports whether rule to is reached from rule from through items
// that can be empty only, along the DFS stack: a left recursion.
func (p *gParser) leading(to int, short []int, stack []gFrame) bool {
	// The DFS went from each frame into the next through item index
	// item-1 of alternative alt.
	cycle, ok := cycleOf(to, stack)
	if !ok {
		return false
	}
	for _, f := range cycle {
		alt := p.rules[f.rule].alts[f.alt]
		for j := 0; j < f.item-1; j++ {
			it := alt[j]
			if !(it.min == 0 || (it.rule >= 0 && short[it.rule] == 0) || (it.rule < 0 && it.chars == 0)) {
				return false
			}
		}
	}
	return true
}

// repeatsEmpty reports whether the cycle from rule to back to it along
// the DFS stack goes through an item repeated more than once whose body can
// match the empty text. The measures count a rule on the stack as one
// state, which holds for plain recursion; such an item instead keeps every
// repeat live at each level, and each level holds the cycle again, so the
// stacks llama.cpp advances grow without bound (a hang, not an error).
func (p *gParser) repeatsEmpty(to int, short []int, stack []gFrame) bool {
	cycle, ok := cycleOf(to, stack)
	if !ok {
		return false
	}
	for _, f := range cycle {
		it := p.rules[f.rule].alts[f.alt][f.item-1] // the item the walk went through
		if reps(it) > 1 && it.rule >= 0 && short[it.rule] == 0 {
			return true
		}
	}
	return false
}

// shortest computes each rule's shortest text in characters (gInf for
// none) by Knuth's generalisation of Dijkstra's algorithm: a rule is
// settled at the smallest value among its alternatives whose referenced
// rules are all settled. Linear in the grammar, times a log.
func (p *gParser) shortest() []int {
	n := len(p.rules)
	type altRef struct{ rule, alt int }
	var (
		pending = make([][]int, n) // per rule, per alternative: references not yet settled
		users   = make([][]altRef, n)
	)
	val := make([]int, n)
	settled := make([]bool, n)
	for i := range val {
		val[i] = gInf
	}
	h := &minHeap{}
	for r := range p.rules {
		pending[r] = make([]int, len(p.rules[r].alts))
		for a, alt := range p.rules[r].alts {
			sum := 0
			for _, it := range alt {
				if it.min == 0 {
					continue
				}
				if it.rule < 0 {
					sum = sadd(sum, smul(it.chars, it.min))
					continue
				}
				pending[r][a]++
				users[it.rule] = append(users[it.rule], altRef{r, a})
			}
			if pending[r][a] == 0 {
				heap.Push(h, [2]int{sum, r})
			}
		}
	}
	for h.Len() > 0 {
		top := heap.Pop(h).([2]int)
		v, r := top[0], top[1]
		if settled[r] {
			continue
		}
		settled[r], val[r] = true, v
		for _, u := range users[r] {
			pending[u.rule][u.alt]--
			if pending[u.rule][u.alt] == 0 {
				sum := 0
				for _, it := range p.rules[u.rule].alts[u.alt] {
					if it.min == 0 {
						continue
					}
					if it.rule < 0 {
						sum = sadd(sum, smul(it.chars, it.min))
					} else {
						sum = sadd(sum, smul(val[it.rule], it.min))
					}
				}
				heap.Push(h, [2]int{sum, u.rule})
			}
		}
	}
	return val
}

type minHeap [][2]int

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i][0] < h[j][0] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.([2]int)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
