package app

import (
	"kvwin/window"
	"kvwin/window/memory"
)

// DefaultMemoryMaxBytes is --memory-max-bytes's default, 512 MiB: the
// conversation state a server keeps in memory between turns. The rule: its
// half for stored conversations' indexes holds whole the largest
// conversation an open issue tests (100,000 stored short turns, about
// 200 MB by memory.Index.Bytes), and a 2,000-turn chain's 4,000 items many
// times over.
const DefaultMemoryMaxBytes = 512 << 20

// heldBounds splits --memory-max-bytes among what keeps conversation state
// in memory, each bounded by bytes with the least recently used dropped
// first (and read back from the store, or rebuilt from the next request,
// when used again; never refused): half for the stored conversations'
// branch indexes, a quarter for the indexes of conversations served from
// their own turns, an eighth each for the Responses chains' messages and
// the memoized packets.
type heldBounds struct {
	store, responses, indexes, packets int64
}

func boundsOf(f Config) heldBounds {
	n := f.MemoryMaxBytes
	if n <= 0 {
		n = DefaultMemoryMaxBytes
	}
	return heldBounds{store: n / 2, indexes: n / 4, responses: n / 8, packets: n / 8}
}

// storeBounds sets cfg's bounds from f.
func storeBounds(f Config, cfg memory.StoreConfig) memory.StoreConfig {
	b := boundsOf(f)
	cfg.HeldBytes, cfg.ResponseBytes = b.store, b.responses
	return cfg
}

// windowBounds sets cfg's bounds from f.
func windowBounds(f Config, cfg window.Config) window.Config {
	b := boundsOf(f)
	cfg.IndexBytes, cfg.PacketBytes = b.indexes, b.packets
	return cfg
}
