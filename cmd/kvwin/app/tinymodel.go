package app

import (
	"fmt"
	"path/filepath"

	"kvwin/gguf"
	"kvwin/kvcache"
)

// tinyModelName is the file name of the generated test model in a data dir.
const tinyModelName = "kvwin-tiny.gguf"

// ensureTinyModel returns the test model under dir, writing it first if it
// is not there. The file is deterministic, so an existing one is reused —
// unless it has another shape (written by an older kvwin), then it is
// rewritten so every kvwin of this version measures the same model.
func EnsureTinyModel(dir string) (string, error) {
	if err := kvcache.MkdirPrivate(dir); err != nil {
		return "", fmt.Errorf("create data dir %q: %w", dir, err)
	}
	path := filepath.Join(dir, tinyModelName)
	want := gguf.DefaultTinyConfig().Shape()
	if got, err := gguf.Read(path); err == nil {
		got.Path = ""
		if got == want {
			return path, nil
		}
	}
	if err := gguf.WriteTiny(path, gguf.DefaultTinyConfig()); err != nil {
		return "", err
	}
	return path, nil
}
