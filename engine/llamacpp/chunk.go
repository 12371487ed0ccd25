package llamacpp

// How a prompt is cut into llama_decode batches, and why its last chunk is
// never a single token.
//
// llama.cpp computes a batch of one row with other kernels than a batch of
// several (ggml's vector dot products rather than its matrix multiplication),
// and the two round differently. From two rows on, a row's logits are
// bit-identical whatever else the batch holds: measured on the test model,
// the last token's logits agree bit for bit whether it ends a chunk of 2, 3,
// 16, 64 or 512 rows, after a prefix decoded in chunks of 100 or 512, with 1
// or 2 threads; alone in its batch every logit differs. So a prompt's last
// token is decoded with at least one other prompt token, cold or cached:
// reuse stops lastChunk tokens short of the prompt's end, and chunking never
// leaves a lone token for a batch of its own. The same request with the same
// seed then gives the same answer whether its prefix was cached or not, and
// a cold prompt needs no decode call of its own for its last token.

// lastChunk is the fewest prompt tokens decoded in the batch that ends a
// prompt (a one-token prompt is decoded alone, cached or not).
const lastChunk = 2

// reuseLimit is how many of a prompt's n tokens may come from a cache.
func reuseLimit(n int) int { return max(0, n-lastChunk) }

// chunk is how many of a prompt's remaining tokens go into a batch with room
// for room more: as many as fit, less the few that would otherwise be left
// for a last batch shorter than lastChunk. It is at least 1 when remaining
// and room are (a cache too full for two rows at once can then still make
// progress, at the price of that guarantee).
func chunk(remaining, room int) int {
	n := min(remaining, room)
	if left := remaining - n; left > 0 && left < lastChunk {
		n = max(1, n-(lastChunk-left))
	}
	return n
}
