package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"kvwin/gguf"
)

// runCmd runs kvwin with args in-process and returns its standard output.
func runCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("kvwin %v: %v", args, err)
	}
	return out.Bytes()
}

func TestModelTinyThenInspectJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	runCmd(t, "model", "tiny", "--out", path, "--layers", "3", "--embd", "96", "--heads", "6", "--kv-heads", "2", "--ff", "300")
	out := runCmd(t, "gguf", "inspect", path, "--json", "--vram", "1GiB", "--slots", "2")
	var got struct {
		Layers    int    `json:"layers"`
		KVHeads   int    `json:"kv_heads"`
		HeadDim   int    `json:"head_dim"`
		Embedding int    `json:"embedding_length"`
		Arch      string `json:"architecture"`
		Context   int    `json:"context_length"`
		KVBytes   int    `json:"kv_bytes_per_token"`
		Plan      struct {
			TokensPerSlot int `json:"tokens_per_slot"`
			Prefill       []struct {
				Tokens int `json:"tokens"`
			} `json:"prefill"`
		} `json:"plan"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&got); err != nil || dec.More() {
		t.Fatalf("standard output is not one JSON document (%v): %s", err, out)
	}
	if got.Arch != "llama" || got.Layers != 3 || got.KVHeads != 2 || got.HeadDim != 16 || got.Embedding != 96 || got.Context != 32768 {
		t.Fatalf("shape %+v", got)
	}
	if want := 2 * 3 * 2 * 16 * 2; got.KVBytes != want {
		t.Fatalf("kv_bytes_per_token %d, want 2·layers·kv_heads·head_dim·2 = %d", got.KVBytes, want)
	}
	if got.Plan.TokensPerSlot == 0 || len(got.Plan.Prefill) != 4 || got.Plan.Prefill[3].Tokens != 131072 {
		t.Fatalf("plan %+v", got.Plan)
	}
	def := gguf.DefaultTinyConfig().Shape()
	if def.KVBytesPerToken("f16") != 2*def.Layers*def.KVHeads*def.HeadDim*2 {
		t.Fatal("default shape's KV bytes per token disagree with the formula")
	}
}

// --template writes the file's text as the model's chat template.
func TestModelTinyTemplateFlag(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "t.jinja")
	src := "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
	if err := os.WriteFile(tmpl, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tiny.gguf")
	runCmd(t, "model", "tiny", "--out", path, "--ff", "64", "--template", tmpl)
	s, err := gguf.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.ChatTemplate != src {
		t.Fatalf("chat template %q, want %q", s.ChatTemplate, src)
	}
}
