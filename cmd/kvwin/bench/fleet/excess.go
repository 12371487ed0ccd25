package fleet

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// The excess over the oracle, by cause: for each turn, what it computed
// beyond the oracle's share of it (oracleTurns), summed by the kind of
// turn. A first turn computes its system prompt again where no slot of its
// node held it; a returning turn is told apart by where its conversation's
// KV was, on the node of its previous turn, when it arrived (a slot, a
// snapshot in RAM or on disk, an older snapshot of it, or nowhere:
// evicted) and whether the router sent it back there. It is what tells
// why a policy computes more than the oracle, and so what a router could
// do better.

// holds says where n keeps conversation ci's KV prev: "slot", "prompt
// cache" (a llama-server's --cache-ram holding all of it), "ram" or "disk"
// (a snapshot holding all of it), "ram, older" or "disk, older" (a
// snapshot of an earlier turn), else "lost".
func (n *node) holds(ci int, prev []int) string {
	if n == nil {
		return "lost"
	}
	for _, o := range n.slots {
		if lcp(o.kv, prev) >= len(prev) {
			return "slot"
		}
	}
	if n.cache != nil && slices.ContainsFunc(n.cache.entries, func(e []int) bool { return lcp(e, prev) >= len(prev) }) {
		return "prompt cache"
	}
	if n.store == nil {
		return "lost"
	}
	var best *savedKV
	for _, f := range n.store.files {
		if lcp(f.tokens, prev) == len(f.tokens) && strings.HasPrefix(f.id, fmt.Sprint(ci)+"/") && (best == nil || len(f.tokens) > len(best.tokens)) {
			best = f
		}
	}
	switch {
	case best == nil:
		return "lost"
	case len(best.tokens) < len(prev):
		return best.medium.String() + ", older"
	}
	return best.medium.String()
}

// excess sums each turn's prefill beyond the oracle's (oracle[i], as
// oracleTurns gives it) by cause.
func excess(turns []*turnRecord, oracle []int) map[string]int {
	out := map[string]int{}
	last := map[int]string{} // each conversation's backend of its last turn
	for i, o := range oracle {
		t := turns[i]
		if t.err != nil {
			continue
		}
		cause := "first turn"
		if t.index > 0 {
			where := "back to its node"
			if t.backend != last[t.ci] {
				where = "to another node"
			}
			cause = "return, its KV in " + t.held + ", sent " + where
		}
		last[t.ci] = t.backend
		if d := t.computed - o; d != 0 {
			out[cause] += d
		}
	}
	return out
}

// PrintExcess writes, for each row that has them, the causes of its
// prefill beyond the oracle's, largest first, in tokens and as a share
// of the oracle's prefill.
func PrintExcess(w io.Writer, rows []Row) {
	for _, r := range rows {
		if len(r.Excess) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s at load %.2f (%s): prefill beyond the oracle's %d tokens\n", r.Policy, r.Load, cmp.Or(r.Tiers, "no tiers"), r.PrefillTokens-r.OraclePrefill)
		causes := slices.SortedFunc(maps.Keys(r.Excess), func(a, b string) int { return cmp.Compare(r.Excess[b], r.Excess[a]) })
		for _, c := range causes {
			fmt.Fprintf(w, "  %10d  %5.2fx  %s\n", r.Excess[c], float64(r.Excess[c])/float64(max(r.OraclePrefill, 1)), c)
		}
	}
}
