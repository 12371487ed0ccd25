package app

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"kvwin/gguf"
)

// TestEnsureTinyModelRewritesAnOlderVersion: a data dir holding the test
// model as an older kvwin wrote it (another general.version, here the
// previous one, whose tokenizer named another pre-tokenizer) gets the
// current model, so every kvwin of a version measures the same file; the
// current one is kept as it is.
func TestEnsureTinyModelRewritesAnOlderVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, tinyModelName)
	if err := gguf.WriteTiny(path, gguf.DefaultTinyConfig()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// general.version is a GGUF string: its key, type 8, length 1, value.
	key := append([]byte("general.version"), 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0)
	at := bytes.Index(raw, append(key, gguf.TinyVersion...))
	if at < 0 || len(gguf.TinyVersion) != 1 {
		t.Fatalf("general.version %q not found as a one-byte GGUF string", gguf.TinyVersion)
	}
	old := bytes.Clone(raw)
	old[at+len(key)] = gguf.TinyVersion[0] - 1
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := gguf.Read(path); err != nil || got.Version == gguf.TinyVersion {
		t.Fatalf("the older file reads as version %q, %v", got.Version, err)
	}

	got, err := EnsureTinyModel(dir)
	if err != nil || got != path {
		t.Fatalf("EnsureTinyModel = %q, %v; want %q", got, err, path)
	}
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now, raw) {
		t.Fatalf("the older model was not rewritten as the current one (%d bytes, want %d)", len(now), len(raw))
	}
	info, _ := os.Stat(path)
	if _, err := EnsureTinyModel(dir); err != nil {
		t.Fatal(err)
	}
	// A write renames a new file into place: another file, whatever the
	// clock's resolution.
	if again, _ := os.Stat(path); !os.SameFile(info, again) {
		t.Fatal("the current model was written again")
	}
}
