package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/x448/float16"
)

// TinyVersion is the test model's general.version: "2" writes text
// (bigram.go); "3" names GPT-2's pre-tokenizer (see vocab.go), the same
// tokens, faster. A kvwin finding a model of another version rewrites it.
const TinyVersion = "3"

// TinyConfig is the shape of the generated test model.
//
// The defaults follow a real model's proportions scaled down: few layers, a
// narrow residual stream and a wide feed-forward, so that the linear (weights)
// term of prefill dominates the attention term up to several thousand tokens
// (crossover ≈ params / (layers · embedding)), as in 7–70B models, while a
// 4,000-token prefill still takes a fraction of a second on two CPU cores.
type TinyConfig struct {
	Layers      int    // transformer blocks
	Embedding   int    // residual width (n_embd)
	Heads       int    // attention heads
	KVHeads     int    // key/value heads (grouped-query attention)
	FeedForward int    // feed-forward width
	Context     int    // trained context length written to the file
	Seed        uint64 // weights are a pure function of (seed, tensor name)
	F32         bool   // store matrices as f32 instead of f16
	// VocabPath, if set, is a real model's vocabulary to use instead of
	// the byte-level one (see realvocab.go).
	VocabPath string
	// Template, if set, is the chat template (Jinja) to write instead of
	// ChatML.
	Template string
	// Agent writes the agent model (agent.go): weights set by hand so it
	// answers "Done." and ends, or answers the tool call its ask ends with.
	Agent bool
}

// DefaultTinyConfig returns the default test-model shape.
func DefaultTinyConfig() TinyConfig {
	return TinyConfig{Layers: 2, Embedding: 128, Heads: 2, KVHeads: 1, FeedForward: 4096, Context: 32768, Seed: 1}
}

// Validate checks the shape is one llama.cpp accepts.
func (c TinyConfig) Validate() error {
	if c.Agent {
		if err := c.validateAgent(); err != nil {
			return err
		}
	}
	switch {
	case c.Layers < 1 || c.Embedding < 8 || c.Heads < 1 || c.KVHeads < 1 || c.FeedForward < 1:
		return errors.New("tiny model: layers, embedding, heads, kv heads and feed-forward must be positive")
	case c.Embedding%c.Heads != 0:
		return fmt.Errorf("tiny model: embedding %d is not a multiple of heads %d", c.Embedding, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("tiny model: heads %d is not a multiple of kv heads %d", c.Heads, c.KVHeads)
	case (c.Embedding/c.Heads)%2 != 0:
		return fmt.Errorf("tiny model: head size %d must be even for RoPE", c.Embedding/c.Heads)
	case c.Context < 256:
		return fmt.Errorf("tiny model: context %d is below 256", c.Context)
	}
	return nil
}

// HeadDim is the size of one attention head.
func (c TinyConfig) HeadDim() int { return c.Embedding / c.Heads }

// Shape returns the shape the written file will report.
func (c TinyConfig) Shape() Shape {
	s := Shape{
		Name: c.name(), Version: TinyVersion, Architecture: "llama", Layers: c.Layers, Embedding: c.Embedding,
		FeedForward: c.FeedForward, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim(),
		ContextLength: c.Context, VocabSize: c.vocabSize(), FileType: ggml.FileTypeF16.String(),
		ChatTemplate: c.template(),
	}
	if c.F32 {
		s.FileType = ggml.FileTypeF32.String()
	}
	for _, t := range c.tensors() {
		n := uint64(1)
		for _, d := range t.shape {
			n *= d
		}
		s.Params += n
	}
	return s
}

type tinyTensor struct {
	name   string
	shape  []uint64 // ggml ne order: ne[0] is the contiguous dimension
	matrix bool     // false: a norm vector, all ones, always f32
}

// vocabSize is the number of tokens; a vocabulary that does not load
// counts as the byte-level one (WriteTiny reports the error).
func (c TinyConfig) vocabSize() int {
	if c.Agent {
		return agentVocabSize
	}
	if c.VocabPath == "" {
		return tinyVocabSize
	}
	v, err := loadVocab(c.VocabPath)
	if err != nil {
		return tinyVocabSize
	}
	return len(v.tokens)
}

// name is the file's general.name.
func (c TinyConfig) name() string {
	if c.Agent {
		return "kvwin-tiny-agent"
	}
	return "kvwin-tiny"
}

func (c TinyConfig) template() string {
	if c.Template != "" {
		return c.Template
	}
	return TinyChatTemplate
}

func (c TinyConfig) tensors() []tinyTensor {
	return c.tensorsFor(c.vocabSize())
}

func (c TinyConfig) tensorsFor(vocab int) []tinyTensor {
	d, kv, ff, v := uint64(c.Embedding), uint64(c.KVHeads*c.HeadDim()), uint64(c.FeedForward), uint64(vocab)
	ts := []tinyTensor{
		{"token_embd.weight", []uint64{d, v}, true},
		{"output_norm.weight", []uint64{d}, false},
		{"output.weight", []uint64{d, v}, true},
	}
	for i := range c.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			tinyTensor{p + "attn_norm.weight", []uint64{d}, false},
			tinyTensor{p + "attn_q.weight", []uint64{d, d}, true},
			tinyTensor{p + "attn_k.weight", []uint64{d, kv}, true},
			tinyTensor{p + "attn_v.weight", []uint64{d, kv}, true},
			tinyTensor{p + "attn_output.weight", []uint64{d, d}, true},
			tinyTensor{p + "ffn_norm.weight", []uint64{d}, false},
			tinyTensor{p + "ffn_gate.weight", []uint64{d, ff}, true},
			tinyTensor{p + "ffn_up.weight", []uint64{d, ff}, true},
			tinyTensor{p + "ffn_down.weight", []uint64{ff, d}, true},
		)
	}
	return ts
}

// WriteTiny writes the test model to path. The bytes are a pure function of
// c: the same config always writes the same file. The file appears atomically
// (written beside path, then renamed), so a crash never leaves half a model.
func WriteTiny(path string, c TinyConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tiny-*.gguf")
	if err != nil {
		return fmt.Errorf("write tiny model: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	tokens, types := tinyVocab()
	vocab := &vocabFile{model: "gpt2", pre: "gpt-2", tokens: tokens, types: types, merges: []string{},
		bos: TinyTokenEndOfText, eos: TinyTokenIMEnd, eot: TinyTokenIMEnd}
	if c.Agent {
		vocab.tokens, vocab.types = agentVocab()
	}
	if c.VocabPath != "" {
		if vocab, err = loadVocab(c.VocabPath); err != nil {
			tmp.Close()
			return fmt.Errorf("write tiny model: %w", err)
		}
	}
	ftype := ggml.FileTypeF16
	if c.F32 {
		ftype = ggml.FileTypeF32
	}
	kv := ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           c.name(),
		"general.version":                        TinyVersion,
		"general.file_type":                      uint32(ftype),
		"general.alignment":                      uint32(32),
		"llama.block_count":                      uint32(c.Layers),
		"llama.context_length":                   uint32(c.Context),
		"llama.embedding_length":                 uint32(c.Embedding),
		"llama.feed_forward_length":              uint32(c.FeedForward),
		"llama.attention.head_count":             uint32(c.Heads),
		"llama.attention.head_count_kv":          uint32(c.KVHeads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(c.HeadDim()),
		"llama.rope.freq_base":                   float32(c.ropeBase()),
		"llama.vocab_size":                       uint32(len(vocab.tokens)),
		"tokenizer.chat_template":                c.template(),
	}
	for k, v := range vocab.keys() {
		kv[k] = v
	}
	if c.VocabPath == "" {
		delete(kv, "tokenizer.ggml.add_space_prefix") // the file's bytes stay as before
	}
	text := newBigram(c.Embedding)
	var design map[string]map[[2]int]float64
	if c.Agent {
		text, design = nil, agentDesign(c)
	}
	var ts []*ggml.Tensor
	for _, t := range c.tensorsFor(len(vocab.tokens)) {
		kind, size := uint32(0), 4 // ggml type F32
		if t.matrix && !c.F32 {
			kind, size = 1, 2 // F16
		}
		var wt io.WriterTo = &weights{seed: c.Seed, t: t, size: size, text: text}
		if design != nil {
			wt = &designed{t: t, size: size, set: design[t.name]}
		}
		ts = append(ts, &ggml.Tensor{Name: t.name, Kind: kind, Shape: t.shape, WriterTo: wt})
	}
	if err := ggml.WriteGGUF(tmp, kv, ts); err != nil {
		tmp.Close()
		return fmt.Errorf("write tiny model: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write tiny model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write tiny model: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write tiny model: %w", err)
	}
	return nil
}

// ropeBase is the file's RoPE frequency base.
func (c TinyConfig) ropeBase() float64 {
	if c.Agent {
		return agentRopeBase
	}
	return 10000
}

// designed writes a tensor of the agent model: its set entries, zero
// elsewhere; norm vectors are ones.
type designed struct {
	t    tinyTensor
	size int
	set  map[[2]int]float64 // (out, in) → value
}

func (w *designed) WriteTo(out io.Writer) (int64, error) {
	in := int(w.t.shape[0])
	n := in
	if len(w.t.shape) > 1 {
		n *= int(w.t.shape[1])
	}
	vals := make([]float32, n)
	if !w.t.matrix {
		for i := range vals {
			vals[i] = 1
		}
	}
	for at, v := range w.set {
		vals[at[0]*in+at[1]] = float32(v)
	}
	buf := make([]byte, 0, n*w.size)
	for _, v := range vals {
		buf = appendValue(buf, v, w.size)
	}
	written, err := out.Write(buf)
	return int64(written), err
}

// appendValue appends v as f16 (size 2) or f32 (size 4).
func appendValue(buf []byte, v float32, size int) []byte {
	if size == 2 {
		return binary.LittleEndian.AppendUint16(buf, float16.Fromfloat32(v).Bits())
	}
	return binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
}

// weights generates one tensor's data: uniform in ±√(3/fan_in) (unit
// variance through each matrix) from a PCG stream seeded by (seed, name), so
// tensors can be written in any order, in parallel, with the same bytes.
// The token embeddings and output matrix are the text statistics instead,
// and the blocks' output projections are scaled (see bigram.go).
type weights struct {
	seed uint64
	t    tinyTensor
	size int
	text *bigram
}

// rowOf returns the fixed row r of a text tensor, or nil for random data.
func (w *weights) rowOf(r int) []float32 {
	if w.text == nil {
		return nil
	}
	d := int(w.t.shape[0])
	switch w.t.name {
	case "token_embd.weight":
		return w.text.embedding(r, d)
	case "output.weight":
		return w.text.output(r, d)
	}
	return nil
}

// scale is the factor on the tensor's random values.
func (w *weights) scale() float32 {
	if w.text != nil && (strings.HasSuffix(w.t.name, ".attn_output.weight") || strings.HasSuffix(w.t.name, ".ffn_down.weight")) {
		return blockOutputScale
	}
	return 1
}

func (w *weights) WriteTo(out io.Writer) (int64, error) {
	n := 1
	for _, d := range w.t.shape {
		n *= int(d)
	}
	h := fnv.New64a()
	h.Write([]byte(w.t.name))
	rng := rand.New(rand.NewPCG(w.seed, h.Sum64()))
	scale := float32(math.Sqrt(3 / float64(w.t.shape[0])))
	buf := make([]byte, 0, n*w.size)
	scale *= w.scale()
	d := int(w.t.shape[0])
	var row []float32 // the current row of a text tensor
	for i := range n {
		v := float32(1) // norms
		if i%d == 0 && w.t.matrix {
			row = w.rowOf(i / d)
		}
		switch {
		case row != nil:
			v = row[i%d]
		case w.t.matrix:
			v = (rng.Float32()*2 - 1) * scale
		}
		buf = appendValue(buf, v, w.size)
	}
	written, err := out.Write(buf)
	return int64(written), err
}
