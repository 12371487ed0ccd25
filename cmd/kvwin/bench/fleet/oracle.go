package fleet

// The oracle's prefill: for each turn in the order turns arrived, the
// prompt tokens beyond the longest prefix it shares with any earlier
// turn's prompt and answer (what a backend holds after serving it: the
// answer but its last token, its end token, which is sampled and never
// computed into KV), as `kvwin bench route` defines it (it holds the
// answer's text, without the end token):
//
//	oracle = Σ over turns of (prompt tokens − that longest shared prefix)
//
// the tokens no earlier turn of the run ever sent. No router can do better
// with slots of any size. Shared prefixes are found block by block
// (16-token blocks, chained hashes) and then extended token by token.

const oracleBlock = 16

// oracleTotal sums the oracle's prefill of each turn (oracleTurns).
func oracleTotal(each []int) int {
	total := 0
	for _, n := range each {
		total += n
	}
	return total
}

// oracleTurns is the oracle's prefill of each turn.
func oracleTurns(turns []*turnRecord) []int {
	seen := map[uint64][]int{} // chained hash of a block prefix → a held sequence with it
	out := make([]int, len(turns))
	for i, t := range turns {
		if t.err != nil {
			continue
		}
		p := t.conv.prompt(t.index)
		held := t.conv.stream[:heldEnd(t.conv, t.index)]
		var from []int
		h := uint64(0)
		for b := 0; (b+1)*oracleBlock <= len(p); b++ {
			h = blockHash(h, p[b*oracleBlock:(b+1)*oracleBlock])
			v, ok := seen[h]
			if !ok {
				break
			}
			from = v
		}
		best := 0
		if from != nil {
			best = lcp(from, p)
		}
		out[i] = len(p) - best
		h = 0
		for b := 0; (b+1)*oracleBlock <= len(held); b++ {
			h = blockHash(h, held[b*oracleBlock:(b+1)*oracleBlock])
			seen[h] = held
		}
	}
	return out
}

// heldEnd is where the KV a backend holds after serving turn t of c ends:
// its prompt and its answer but the answer's last token (node.finish).
func heldEnd(c *conversation, t int) int { return max(c.promptEnd[t], c.answerEnd[t]-1) }

// blockHash chains parent with a block's tokens (FNV-1a over the words).
func blockHash(parent uint64, block []int) uint64 {
	h := parent ^ 0xcbf29ce484222325
	for _, t := range block {
		h ^= uint64(t)
		h *= 0x100000001b3
	}
	return h
}
