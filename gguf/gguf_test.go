package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestTinyModelIsDeterministicAndReadsBackItsShape(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  TinyConfig
	}{
		{"default", DefaultTinyConfig()},
		{"wider, f32", TinyConfig{Layers: 3, Embedding: 64, Heads: 4, KVHeads: 2, FeedForward: 96, Context: 4096, Seed: 9, F32: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := filepath.Join(dir, tt.name+"-a.gguf"), filepath.Join(dir, tt.name+"-b.gguf")
			for _, p := range []string{a, b} {
				if err := WriteTiny(p, tt.cfg); err != nil {
					t.Fatal(err)
				}
			}
			ab, _ := os.ReadFile(a)
			bb, _ := os.ReadFile(b)
			if !bytes.Equal(ab, bb) {
				t.Fatal("the same config wrote different bytes")
			}
			got, err := Read(a)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.cfg.Shape()
			want.Path = a
			if got != want {
				t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
			}
			kv := 2 * tt.cfg.Layers * tt.cfg.KVHeads * (tt.cfg.Embedding / tt.cfg.Heads) * 2
			if got.KVBytesPerToken("f16") != kv {
				t.Fatalf("kv bytes per token %d, want 2·layers·kv_heads·head_dim·2 = %d", got.KVBytesPerToken("f16"), kv)
			}
		})
	}
	other := DefaultTinyConfig()
	other.Seed = 2
	p := filepath.Join(dir, "seed2.gguf")
	if err := WriteTiny(p, other); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(filepath.Join(dir, "default-a.gguf"))
	bb, _ := os.ReadFile(p)
	if bytes.Equal(ab, bb) || len(ab) != len(bb) {
		t.Fatal("another seed must change the weights, not the size")
	}
}

func TestTinyDefaultsFollowTheIssue(t *testing.T) {
	s := DefaultTinyConfig().Shape()
	if s.ContextLength < 32768 {
		t.Fatalf("trained context %d < 32768", s.ContextLength)
	}
	if s.Crossover() < 3000 {
		t.Fatalf("crossover %d tokens: the weights term must dominate for several thousand tokens", s.Crossover())
	}
}

func TestBadConfigsAndFiles(t *testing.T) {
	dir := t.TempDir()
	bad := []TinyConfig{
		{Layers: 2, Embedding: 130, Heads: 4, KVHeads: 1, FeedForward: 8, Context: 4096}, // not a multiple of heads
		{Layers: 2, Embedding: 128, Heads: 4, KVHeads: 3, FeedForward: 8, Context: 4096}, // heads not a multiple of kv heads
		{Layers: 0, Embedding: 128, Heads: 4, KVHeads: 1, FeedForward: 8, Context: 4096}, // no layers
		{Layers: 2, Embedding: 128, Heads: 4, KVHeads: 1, FeedForward: 8, Context: 100},  // context too small
	}
	for i, c := range bad {
		if err := WriteTiny(filepath.Join(dir, "bad.gguf"), c); err == nil {
			t.Fatalf("config %d accepted: %+v", i, c)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.gguf")); !os.IsNotExist(err) {
		t.Fatal("a rejected config left a file")
	}
	notGGUF := filepath.Join(dir, "x.gguf")
	os.WriteFile(notGGUF, []byte("not a model"), 0o644)
	if _, err := Read(notGGUF); err == nil {
		t.Fatal("read a file that is not GGUF")
	}
	if _, err := Read(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Fatal("read a missing file")
	}
}

// Metadata keeps the scalars Ollama's CLI reads from /api/show's model_info
// and leaves out the arrays (the vocabulary).
func TestMetadata(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := WriteTiny(path, DefaultTinyConfig()); err != nil {
		t.Fatal(err)
	}
	md, err := Metadata(path)
	if err != nil {
		t.Fatal(err)
	}
	shape, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if md["general.architecture"] != "llama" || md["llama.embedding_length"] != uint32(shape.Embedding) {
		t.Fatalf("architecture %v, embedding %v (shape %d)", md["general.architecture"], md["llama.embedding_length"], shape.Embedding)
	}
	if md["general.parameter_count"] != shape.Params {
		t.Fatalf("parameter_count %v, shape says %d", md["general.parameter_count"], shape.Params)
	}
	if _, ok := md["tokenizer.ggml.tokens"]; ok {
		t.Fatal("the vocabulary array is in the metadata")
	}
}
