package llamacpp

import (
	"sync"

	"github.com/ollama/ollama/llama"
)

// One graph computation at a time in the process. The pinned binding's
// CPU matrix multiply (llamafile's tinyBLAS, ggml-cpu/llamafile/sgemm.cpp,
// tinyBLAS::gemm) hands its work out from a process-wide counter,
// `static std::atomic<int64_t> current_chunk`, not one per computation: two
// contexts computing at once — two models served by one process, the
// nodes of an in-process fleet, a baseline beside an engine — take each
// other's chunks, and rows of their outputs are never written. The logits
// come out NaN; sampled under a grammar, the token is one the grammar
// refuses and llama.cpp aborts the process ("Unexpected empty grammar
// stack"). A context on its own is unaffected, so an engine's one loop
// pays nothing for this lock but an uncontended Lock.
var computeMu sync.Mutex

// decode is c.Decode(b) under computeMu.
func decode(c *llama.Context, b *llama.Batch) error {
	computeMu.Lock()
	defer computeMu.Unlock()
	return c.Decode(b)
}
