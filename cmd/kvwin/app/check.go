package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"kvwin/engine/llamacpp"
	"kvwin/gguf"
	"kvwin/window"
)

// Check reports whether f could be served, without serving it: what New
// would refuse (keys, the window policy, retention) and, for each embedded
// model, what its load would fail on — a model file that is missing or not
// GGUF, or slots × ctx whose KV cache cannot be allocated here. It loads
// nothing, binds nothing and writes nothing; remote backends are not
// contacted (one unreachable now may join later). kvwin serve --check runs
// it; a reload runs the same checks as it builds.
func Check(f Config) error {
	if f.MemoryTTL < 0 {
		return fmt.Errorf("--memory-ttl %v: must not be negative", f.MemoryTTL)
	}
	if err := checkMemoryStore(f.MemoryStore, f.MemoryStoreTimeout); err != nil {
		return err
	}
	if _, _, err := loadKeys(f); err != nil {
		return err
	}
	var errs []error
	policy := func(p, what string) {
		if p == "" {
			return
		}
		if _, err := window.New(window.Config{Policy: p, Settings: window.Settings{Budget: max(f.WindowBudget, 1024)}}, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s --window %q: %w", what, p, err))
		}
	}
	policy(f.Window, "")
	switch {
	case len(f.Models) > 0:
		for i, m := range f.Models {
			policy(m.Window, fmt.Sprintf("models[%d] (%s):", i, m.Name))
			if m.Model == "" {
				continue // remote
			}
			if err := checkEmbedded(f, m.Model, firstNonZero(m.Slots, f.Slots), firstNonZero(m.Ctx, f.Ctx)); err != nil {
				errs = append(errs, fmt.Errorf("models[%d] (%s): %w", i, m.Name, err))
			}
		}
	case len(f.Backends) > 0:
	default:
		if err := checkEmbedded(f, f.Model, f.Slots, f.Ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkEmbedded checks one embedded model ("": the generated test model,
// which may not be written yet).
func checkEmbedded(f Config, model string, slots, ctx int) error {
	cfg := llamacpp.Config{ModelPath: model, Slots: slots, Ctx: ctx, Threads: f.Threads, Batch: f.Batch}
	if model == "" {
		if p := filepath.Join(f.DataDir, tinyModelName); fileExists(p) {
			cfg.ModelPath = p
		} else {
			return llamacpp.CheckShape(cfg, gguf.DefaultTinyConfig().Shape())
		}
	}
	return llamacpp.Check(cfg)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
