package llamacpp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"kvwin/gguf"
)

// ErrDoesNotFit: the KV cache a configuration asks for (Slots × Ctx
// tokens) cannot be allocated on this machine.
var ErrDoesNotFit = errors.New("the KV cache does not fit in memory")

// maxContextCells bounds Slots × Ctx: llama.cpp counts KV cells and
// positions in 32-bit integers.
const maxContextCells = 1 << 30

// Check reports whether New could load cfg, without loading it: the model
// must be a GGUF file whose header reads, and its KV cache (Slots × Ctx
// tokens at the model's bytes per token) must fit in the memory available
// now (MemAvailable; where the system does not say, only the 32-bit limit
// of llama.cpp's cell count is checked). It reads the file's header only;
// kvwin serve --check and a reload call it before anything is allocated,
// because llama.cpp asked for an impossible cache may allocate and clear it
// page by page until the kernel kills the process.
func Check(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	shape, err := gguf.Read(cfg.ModelPath)
	if err != nil {
		return fmt.Errorf("llamacpp: model %q: %w", cfg.ModelPath, err)
	}
	return fits(cfg, shape, availableMemory)
}

// CheckShape is Check for a model not written yet, of the given shape (the
// generated test model, say).
func CheckShape(cfg Config, shape gguf.Shape) error {
	cfg = cfg.withDefaults()
	if cfg.ModelPath == "" {
		cfg.ModelPath = "(" + shape.Architecture + ")"
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	return fits(cfg, shape, availableMemory)
}

// fits checks cfg's KV cache against the limits; avail reports the memory
// available (false: unknown).
func fits(cfg Config, shape gguf.Shape, avail func() (int64, bool)) error {
	cells := int64(cfg.Slots) * int64(cfg.Ctx)
	if cells > maxContextCells {
		return fmt.Errorf("llamacpp: %w: --slots %d × --ctx %d is %d tokens; llama.cpp holds at most %d", ErrDoesNotFit, cfg.Slots, cfg.Ctx, cells, maxContextCells)
	}
	per := int64(shape.KVBytesPerToken("f16"))
	need := cells * per
	if have, ok := avail(); ok && need > have {
		return fmt.Errorf("llamacpp: %w: --slots %d × --ctx %d × %d bytes a token is %d MiB of KV cache; %d MiB of memory is available",
			ErrDoesNotFit, cfg.Slots, cfg.Ctx, per, need>>20, have>>20)
	}
	return nil
}

// availableMemory is the kernel's estimate of the memory that can be
// allocated without swapping (MemAvailable in /proc/meminfo).
func availableMemory() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
