package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead: whatever a model file holds, Read returns a shape or an error,
// never a panic, and a shape it returns has the numbers kvwin divides by.
// CI runs it for 30 s (.ci/fuzz).
func FuzzRead(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.gguf")
	small := TinyConfig{Layers: 1, Embedding: 8, Heads: 1, KVHeads: 1, FeedForward: 8, Context: 256, Seed: 1}
	if err := WriteTiny(seed, small); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:min(len(data), 4096)])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Read(path)
		if err != nil {
			return
		}
		if s.Layers <= 0 || s.Embedding <= 0 {
			t.Fatalf("Read accepted a shape kvwin cannot plan with: %+v", s)
		}
		_ = s.KVBytesPerToken("f16")
		_ = s.Crossover()
	})
}
