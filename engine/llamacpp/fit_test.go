package llamacpp

import (
	"errors"
	"testing"

	"kvwin/gguf"
)

// fits refuses a KV cache larger than the memory available, or more cells
// than llama.cpp counts, and accepts one that fits or where the memory is
// unknown.
func TestFitsComparesTheKVCacheWithTheMemoryAvailable(t *testing.T) {
	shape := gguf.Shape{Layers: 2, KVHeads: 2, HeadDim: 64} // 2·2·2·64·2 = 1,024 bytes a token
	if per := shape.KVBytesPerToken("f16"); per != 1024 {
		t.Fatalf("bytes a token %d", per)
	}
	for _, tc := range []struct {
		name       string
		slots, ctx int
		avail      int64 // -1: unknown
		fit        bool
	}{
		{"fits", 4, 4096, 64 << 20, true},    // 16 MiB of 64
		{"exactly", 4, 4096, 16 << 20, true}, // 16 MiB of 16
		{"too large", 4, 4096, 16<<20 - 1, false},
		{"ctx 1e8", 1, 100_000_000, 8 << 30, false}, // 95 GiB of 8
		{"unknown memory", 4, 4096, -1, true},
		{"too many cells, memory unknown", 256, 1 << 24, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			avail := func() (int64, bool) { return tc.avail, tc.avail >= 0 }
			err := fits(Config{Slots: tc.slots, Ctx: tc.ctx}, shape, avail)
			if tc.fit != (err == nil) || (err != nil && !errors.Is(err, ErrDoesNotFit)) {
				t.Fatalf("fits: %v, want fit=%v", err, tc.fit)
			}
		})
	}
	if have, ok := availableMemory(); !ok || have <= 0 {
		t.Fatalf("MemAvailable: %d %v", have, ok)
	}
}
