package gguf

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ollamaDir is the pinned Ollama module's directory, whose testdata holds
// the real vocabularies.
func ollamaDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("locate the Ollama module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// The test model with a real vocabulary and template carries them as
// llama.cpp reads them: every token, the special ids, the template.
func TestTinyWithRealVocab(t *testing.T) {
	mod := ollamaDir(t)
	for _, tc := range []struct {
		vocab          string
		size           int
		model          string
		bos, eos       uint32
		addSpacePrefix bool
	}{
		{"model/testdata/llama3.2", 128256, "gpt2", 128000, 128009, false},
		{"model/testdata/gemma2/tokenizer.model", 256000, "llama", 2, 1, false},
	} {
		t.Run(filepath.Base(tc.vocab), func(t *testing.T) {
			c := TinyConfig{Layers: 1, Embedding: 8, Heads: 2, KVHeads: 1, FeedForward: 8, Context: 256, Seed: 1,
				VocabPath: filepath.Join(mod, tc.vocab), Template: "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}
			p := filepath.Join(t.TempDir(), "m.gguf")
			if err := WriteTiny(p, c); err != nil {
				t.Fatal(err)
			}
			s, err := Read(p)
			if err != nil {
				t.Fatal(err)
			}
			if s.VocabSize != tc.size || s.ChatTemplate != c.Template || c.Shape().VocabSize != tc.size {
				t.Fatalf("vocab %d (shape says %d), template %q", s.VocabSize, c.Shape().VocabSize, s.ChatTemplate)
			}
			md, err := Metadata(p)
			if err != nil {
				t.Fatal(err)
			}
			if md["tokenizer.ggml.model"] != tc.model || md["tokenizer.ggml.bos_token_id"] != tc.bos || md["tokenizer.ggml.eos_token_id"] != tc.eos ||
				md["tokenizer.ggml.add_space_prefix"] != tc.addSpacePrefix {
				t.Fatalf("tokenizer keys %v %v %v %v", md["tokenizer.ggml.model"], md["tokenizer.ggml.bos_token_id"], md["tokenizer.ggml.eos_token_id"], md["tokenizer.ggml.add_space_prefix"])
			}
		})
	}
	c := DefaultTinyConfig()
	c.VocabPath = filepath.Join(t.TempDir(), "missing")
	if err := WriteTiny(filepath.Join(t.TempDir(), "x.gguf"), c); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("missing vocabulary: %v", err)
	}
}
