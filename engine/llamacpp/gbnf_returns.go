package llamacpp

import "kvwin/engine"

// checkReturns refuses a recursion whose returns can each match the empty
// text more than one way. llama.cpp's stack advance, when a rule ends,
// walks every way the text after its reference can be empty, into the
// rule that referenced it, and so on up the stack before it deduplicates:
// in x ::= "." x "."?? | "" the text after x is empty two ways, so after k
// characters one advance walks 2^k ways (found by FuzzRawGrammar: with 14
// question marks the fuzzer's worker hung). The returns that can be empty
// form a graph on the rules; an edge of two or more ways inside one of its
// strongly connected components lies on a cycle of such returns, which
// the recursion repeats once per level. Needs m.ways of every rule.
func (p *gParser) checkReturns(m *gMeasures) error {
	type edge struct{ to, ways int }
	n := len(p.rules)
	out := make([][]edge, n)
	succ := make([][]int, n) // out's targets, for sccs
	for r, rule := range p.rules {
		for _, alt := range rule.alts {
			after := 1 // ways the items after alt[i] can all be empty
			for i := len(alt) - 1; i >= 0 && after > 0; i-- {
				it := alt[i]
				if it.rule >= 0 {
					w := after
					if reps(it) > 1 && m.bodyEmpty(it) {
						w = smul(w, m.itemWays(it))
					}
					out[r] = append(out[r], edge{it.rule, w})
					succ[r] = append(succ[r], it.rule)
				}
				after = smul(after, m.itemWays(it))
			}
		}
	}
	comp := sccs(succ)
	for r := range out {
		for _, e := range out[r] {
			if e.ways > 1 && comp[r] == comp[e.to] {
				return engine.Invalid("the grammar recurses through rule %q where the text after it can be empty %d ways (as in x ::= \"a\" x \"b\"?? | \"\"): every level of the recursion multiplies the ways llama.cpp walks when a rule ends; make what follows the recursion match the empty text one way only", p.rules[e.to].name, min(e.ways, maxGrammarWidth+1))
			}
		}
	}
	return nil
}

// sccs numbers the strongly connected components of the graph whose
// vertex v has the edges succ[v] (Tarjan's algorithm, without recursion: a
// grammar can have a million rules). Vertices in one component get one
// number.
func sccs(succ [][]int) []int {
	const unseen = -1
	n := len(succ)
	index, low, comp := make([]int, n), make([]int, n), make([]int, n)
	for i := range index {
		index[i], comp[i] = unseen, unseen
	}
	type frame struct{ v, next int }
	var stack []int
	onStack := make([]bool, n)
	next, comps := 0, 0
	var frames []frame
	for root := range n {
		if index[root] != unseen {
			continue
		}
		frames = append(frames[:0], frame{v: root})
		index[root], low[root] = next, next
		next++
		stack, onStack[root] = append(stack, root), true
		for len(frames) > 0 {
			f := &frames[len(frames)-1]
			if f.next < len(succ[f.v]) {
				w := succ[f.v][f.next]
				f.next++
				switch {
				case index[w] == unseen:
					index[w], low[w] = next, next
					next++
					stack, onStack[w] = append(stack, w), true
					frames = append(frames, frame{v: w})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			frames = frames[:len(frames)-1]
			if len(frames) > 0 {
				u := frames[len(frames)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] == index[v] {
				for {
					w := stack[len(stack)-1]
					stack, onStack[w] = stack[:len(stack)-1], false
					comp[w] = comps
					if w == v {
						break
					}
				}
				comps++
			}
		}
	}
	return comp
}
