package llamacpp

import (
	"cmp"
	"errors"
	"fmt"
	"kvwin/internal/zero"
	"runtime"
	"time"

	"kvwin/engine/queue"
	"kvwin/kvcache"
)

// Config configures the embedded engine. Zero fields take the defaults of
// DefaultConfig; New validates the result.
type Config struct {
	ModelPath string // GGUF file to serve (required)
	ModelID   string // the model name clients use; default: the file's base name without .gguf
	Name      string // backend name in X-Kvwin-Backend and metrics; default "embedded"
	Slots     int    // parallel sequences; default 4
	Ctx       int    // tokens per slot; the KV cache holds Slots × Ctx; default 4096
	Threads   int    // compute threads; default: the cores available
	Batch     int    // most tokens per llama_decode call; default DefaultBatch, at most MaxBatch (docs/serve.md, "Choosing threads and batch", says how to choose)
	Queue     int    // requests waiting for a slot before ErrQueueFull; 0 takes the default 64, -1 means none wait
	// Seed seeds the sampler of a request that names no seed (llama-server's
	// --seed): with one, the same prompt gives the same answer. 0: random
	// per request (the default); the flag's -1 is 0 here.
	Seed uint32
	// PromptCacheBytes bounds the rendered conversation prefixes kept so
	// a turn renders only its new messages; 0 takes kvcache's default
	// (64 MiB).
	PromptCacheBytes int64
	// FlashAttention uses ggml's fused attention kernel.
	FlashAttention bool

	// Registry records which slot holds which block chain; nil gives the
	// engine a registry of its own. The engine registers itself under Name.
	Registry *kvcache.Registry
	// BlockTokens is the registry's block size; default 16.
	BlockTokens int
	// SnapshotDir, if set, keeps the KV of a slot given to another
	// conversation on disk, so the conversation is restored, not prefilled,
	// when it returns. Empty disables snapshots.
	SnapshotDir string
	// SnapshotMaxBytes bounds the snapshots on disk; default 1 GiB.
	SnapshotMaxBytes int64
	// SnapshotRAMBytes keeps the most recent snapshots in host RAM under
	// this budget before they are demoted to disk (kvcache.Store's RAM
	// tier); 0 keeps them on disk only.
	SnapshotRAMBytes int64
	// SnapshotTenantShare is the largest share of SnapshotRAMBytes one
	// tenant's snapshots may hold; 0 means kvcache.DefaultTenantShare.
	SnapshotTenantShare float64
	// SnapshotMinTokens: shorter sequences are not worth a file; default 256.
	SnapshotMinTokens int
	// SnapshotTTL deletes a snapshot not used (saved or restored) for that
	// long: a snapshot holds its conversation's tokens, so a retention
	// promise must reach it. 0 keeps snapshots (within SnapshotMaxBytes).
	SnapshotTTL time.Duration
	// Now is the snapshots' clock (their last use, their expiry); default
	// time.Now. Tests inject one.
	Now func() time.Time

	// Order orders the requests waiting for a slot: by class, then by each
	// tenant's fair share (package queue); Order.FIFO restores arrival
	// order (--queue-order fifo).
	Order queue.Config
	// InteractiveSlots are slots a batch request never takes while they
	// are the last idle ones, so an interactive request arriving finds one
	// without waiting for a batch generation to end (capacity is reserved;
	// nothing running is preempted). Only the starvation bound
	// (Order.BatchEvery) lets batch into them. 0 takes the default, 1 with
	// two slots or more and 0 with one; -1 reserves none. Ignored with
	// Order.FIFO.
	InteractiveSlots int
}

// MaxBatch is the largest Batch. The pinned binding leaves llama.cpp's
// micro-batch at its default of 512 rows, so a larger batch would only be
// split again inside llama_decode, and the split could leave a prompt's last
// token in a micro-batch of its own (see chunk.go).
const MaxBatch = 512

// DefaultBatch is the default Batch, chosen by measurement on the test model
// with 2 threads (kvwin bench prefill --batch B, B = 64 … 512, each run
// against llama.cpp driven directly in batches of 512): the smallest batch
// whose cold prefill is within 5% of the fastest. At 128 the prefill took
// 0.89–1.04× the time of llama.cpp's 512 (six runs), at 256 and 512 about
// 1.0×, at 64 longer; and a smaller chunk is a shorter wait for slots
// generating meanwhile.
const DefaultBatch = 128

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Name: "embedded", Slots: 4, Ctx: 4096, Threads: runtime.NumCPU(), Batch: DefaultBatch, Queue: 64}
}

func (c Config) withDefaults() Config {
	zero.Fill(&c, DefaultConfig())
	c.BlockTokens = cmp.Or(c.BlockTokens, kvcache.DefaultBlockTokens)
	c.SnapshotMinTokens = cmp.Or(c.SnapshotMinTokens, 256)
	if c.InteractiveSlots == 0 && c.Slots > 1 {
		c.InteractiveSlots = 1
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.ModelPath == "":
		return errors.New("llamacpp: no model path")
	case c.Slots < 1 || c.Slots > 256:
		return fmt.Errorf("llamacpp: slots %d out of range 1..256", c.Slots)
	case c.SnapshotTTL < 0:
		return fmt.Errorf("llamacpp: snapshot TTL %v is negative", c.SnapshotTTL)
	case c.Ctx < 64:
		return fmt.Errorf("llamacpp: context per slot %d is below 64 tokens", c.Ctx)
	case c.Threads < 1:
		return fmt.Errorf("llamacpp: threads %d below 1", c.Threads)
	case c.Batch < 1 || c.Batch > MaxBatch:
		return fmt.Errorf("llamacpp: batch %d out of range 1..%d", c.Batch, MaxBatch)
	case c.Queue < -1:
		return fmt.Errorf("llamacpp: queue %d below -1", c.Queue)
	case c.InteractiveSlots < -1 || c.InteractiveSlots >= c.Slots:
		return fmt.Errorf("llamacpp: interactive slots %d: want -1 (none) or fewer than the %d slots", c.InteractiveSlots, c.Slots)
	case c.Order.Quantum < 0 || c.Order.BatchEvery < 0:
		return fmt.Errorf("llamacpp: queue quantum %d, batch every %d: must not be negative", c.Order.Quantum, c.Order.BatchEvery)
	}
	return nil
}
