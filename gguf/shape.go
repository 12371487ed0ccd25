// Package gguf reads a model's shape from a GGUF file and writes kvwin's
// generated test model.
//
// Reading goes through Ollama's GGUF decoder (github.com/ollama/ollama/fs/ggml,
// the version pinned with the embedded engine) so kvwin and the engine agree on
// what a file says; this package only turns its key/value table and tensor
// table into the few numbers kvwin plans with.
package gguf

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// Shape is what kvwin needs to know about a model: enough to size KV caches,
// predict prefill cost and render chat prompts.
type Shape struct {
	Path          string `json:"path,omitempty"`
	Name          string `json:"name,omitempty"`
	Version       string `json:"version,omitempty"` // general.version
	Architecture  string `json:"architecture"`
	Layers        int    `json:"layers"`
	Embedding     int    `json:"embedding_length"`
	FeedForward   int    `json:"feed_forward_length"`
	Heads         int    `json:"heads"`
	KVHeads       int    `json:"kv_heads"`
	HeadDim       int    `json:"head_dim"`       // key (and value) length per head
	ContextLength int    `json:"context_length"` // trained context
	VocabSize     int    `json:"vocab_size"`
	FileType      string `json:"file_type"`
	Params        uint64 `json:"params"` // total weights, from the tensor table
	ChatTemplate  string `json:"chat_template,omitempty"`
	// ChatTemplateToolUse is the named variant for requests with tools
	// (tokenizer.chat_template.tool_use), if the file has one.
	ChatTemplateToolUse string `json:"-"`
}

// Read decodes the header, metadata and tensor table of the GGUF file at path.
// It reads no tensor data, so it is fast on multi-gigabyte files.
func Read(path string) (Shape, error) {
	f, err := os.Open(path)
	if err != nil {
		return Shape{}, fmt.Errorf("open model %q: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Shape{}, fmt.Errorf("open model %q: %w", path, err)
	}
	if err := checkLayout(f, st.Size()); err != nil {
		return Shape{}, fmt.Errorf("read gguf %q: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Shape{}, fmt.Errorf("read gguf %q: %w", path, err)
	}
	// 0: collect no large arrays (vocabulary, merges); the shape needs none.
	g, err := ggml.Decode(f, 0)
	if err != nil {
		return Shape{}, fmt.Errorf("read gguf %q: %w", path, err)
	}
	kv := g.KV()
	s := Shape{
		Path:                path,
		Name:                kv.String("general.name"),
		Version:             kv.String("general.version"),
		Architecture:        kv.Architecture(),
		Layers:              int(kv.BlockCount()),
		Embedding:           int(kv.EmbeddingLength()),
		FeedForward:         int(kv.Uint("feed_forward_length")),
		Heads:               int(kv.HeadCountMax()),
		KVHeads:             int(kv.HeadCountKVMax()),
		HeadDim:             int(kv.EmbeddingHeadCountK()),
		ContextLength:       int(kv.ContextLength()),
		VocabSize:           int(kv.Uint("vocab_size")),
		FileType:            fileType(kv),
		ChatTemplate:        kv.ChatTemplate(),
		ChatTemplateToolUse: kv.String("tokenizer.chat_template.tool_use"),
	}
	for _, t := range g.Tensors().Items() {
		s.Params += t.Elements()
		// The embedding table's second dimension is the vocabulary size,
		// which many files do not state as a key.
		if t.Name == "token_embd.weight" && len(t.Shape) == 2 && s.VocabSize == 0 {
			s.VocabSize = int(t.Shape[1])
		}
	}
	if s.Layers == 0 || s.Embedding == 0 {
		return s, fmt.Errorf("read gguf %q: architecture %q has no block_count or embedding_length", path, s.Architecture)
	}
	return s, nil
}

// KVBytesPerElement returns the bytes of one K or V element for a llama.cpp
// cache type name ("f16", "q8_0", "q4_0"; "" means f16).
func KVBytesPerElement(cacheType string) float64 {
	switch strings.ToLower(cacheType) {
	case "q8_0":
		return 34.0 / 32 // 32 int8 + one f16 scale per block of 32
	case "q4_0":
		return 18.0 / 32
	case "f32":
		return 4
	default:
		return 2
	}
}

// KVBytesPerToken is the KV cache a token occupies:
// 2 (K and V) · layers · kv_heads · head_dim · bytes per element.
func (s Shape) KVBytesPerToken(cacheType string) int {
	return int(2 * float64(s.Layers*s.KVHeads*s.HeadDim) * KVBytesPerElement(cacheType))
}

// Crossover is the prompt length at which prefill's attention term
// (∝ 2·layers·P²·d) matches its weights term (2·params·P):
// params / (layers · embedding). Below it prefill time grows about linearly.
func (s Shape) Crossover() int {
	if s.Layers == 0 || s.Embedding == 0 {
		return 0
	}
	return int(s.Params / uint64(s.Layers*s.Embedding))
}

// fileType names the file's tensor type. Ollama's accessor treats 0 as
// "unknown", but 0 is llama.cpp's "all F32".
func fileType(kv ggml.KV) string {
	if t, ok := kv["general.file_type"].(uint32); ok {
		return ggml.FileType(t).String()
	}
	return kv.FileType().String()
}
