package gguf

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ollama/ollama/convert/sentencepiece"
	"google.golang.org/protobuf/proto"
)

// A real model's vocabulary for the test model (TinyConfig.VocabPath), so
// chat templates, control tokens and tokenization can be tested as a user
// meets them with weights that stay tiny and random. Two formats serve, the
// ones in the pinned Ollama module's testdata:
//   - a directory with encoder.json and vocab.bpe: Llama 3's byte-level BPE,
//     with Llama 3's 256 special tokens appended (ids 128000 on);
//   - a SentencePiece tokenizer.model (Gemma): tokens, scores and types as
//     llama.cpp's own converter writes them.

// vocabFile is a vocabulary as GGUF keys.
type vocabFile struct {
	model, pre string
	tokens     []string
	types      []int32
	scores     []float32 // SentencePiece only
	merges     []string  // BPE only
	bos, eos   uint32
	eot        int64 // -1: none
	spacePref  bool  // SentencePiece's add_space_prefix
}

// llama3Specials are Llama 3's special tokens after its 128000 BPE tokens
// (the Llama 3.1 names; the rest are reserved).
var llama3Specials = map[int]string{
	0: "<|begin_of_text|>", 1: "<|end_of_text|>", 2: "<|reserved_special_token_0|>",
	3: "<|reserved_special_token_1|>", 4: "<|finetune_right_pad_id|>", 5: "<|reserved_special_token_2|>",
	6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>",
}

func loadVocab(path string) (*vocabFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("vocabulary: %w", err)
	}
	if fi.IsDir() {
		return loadBPE(path)
	}
	return loadSPM(path)
}

func loadBPE(dir string) (*vocabFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, "encoder.json"))
	if err != nil {
		return nil, fmt.Errorf("vocabulary: %w", err)
	}
	var enc map[string]int
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("vocabulary %s: %w", dir, err)
	}
	v := &vocabFile{model: "gpt2", pre: "llama-bpe", tokens: make([]string, len(enc)), eot: -1}
	for tok, id := range enc {
		if id < 0 || id >= len(enc) || v.tokens[id] != "" {
			return nil, fmt.Errorf("vocabulary %s: ids are not 0..%d", dir, len(enc)-1)
		}
		v.tokens[id] = tok
	}
	v.types = make([]int32, len(v.tokens), len(v.tokens)+256)
	for i := range v.types {
		v.types[i] = 1
	}
	base := len(v.tokens)
	reserved := 3
	for i := range 256 {
		name, ok := llama3Specials[i]
		if !ok {
			name = fmt.Sprintf("<|reserved_special_token_%d|>", reserved)
			reserved++
		}
		v.tokens = append(v.tokens, name)
		v.types = append(v.types, 3)
	}
	v.bos, v.eos, v.eot = uint32(base), uint32(base+9), int64(base+9)
	f, err := os.Open(filepath.Join(dir, "vocab.bpe"))
	if err != nil {
		return nil, fmt.Errorf("vocabulary: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#version") {
			continue
		}
		v.merges = append(v.merges, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("vocabulary %s: %w", dir, err)
	}
	return v, nil
}

func loadSPM(path string) (*vocabFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vocabulary: %w", err)
	}
	var m sentencepiece.ModelProto
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("vocabulary %s: not a SentencePiece model: %w", path, err)
	}
	v := &vocabFile{model: "llama", pre: "default", eot: -1,
		bos: uint32(m.GetTrainerSpec().GetBosId()), eos: uint32(m.GetTrainerSpec().GetEosId()),
		spacePref: m.GetNormalizerSpec().GetAddDummyPrefix()}
	for i, p := range m.GetPieces() {
		v.tokens = append(v.tokens, p.GetPiece())
		v.scores = append(v.scores, p.GetScore())
		v.types = append(v.types, int32(p.GetType()))
		if p.GetPiece() == "<end_of_turn>" {
			v.eot = int64(i)
		}
	}
	if len(v.tokens) == 0 {
		return nil, fmt.Errorf("vocabulary %s: no pieces", path)
	}
	return v, nil
}

// keys returns the tokenizer's GGUF keys.
func (v *vocabFile) keys() map[string]any {
	kv := map[string]any{
		"tokenizer.ggml.model":            v.model,
		"tokenizer.ggml.pre":              v.pre,
		"tokenizer.ggml.tokens":           v.tokens,
		"tokenizer.ggml.token_type":       v.types,
		"tokenizer.ggml.bos_token_id":     v.bos,
		"tokenizer.ggml.eos_token_id":     v.eos,
		"tokenizer.ggml.add_bos_token":    true,
		"tokenizer.ggml.add_eos_token":    false,
		"tokenizer.ggml.add_space_prefix": v.spacePref,
	}
	if v.eot >= 0 {
		kv["tokenizer.ggml.eot_token_id"] = uint32(v.eot)
	}
	if v.merges != nil {
		kv["tokenizer.ggml.merges"] = v.merges
	}
	if v.scores != nil {
		kv["tokenizer.ggml.scores"] = v.scores
	}
	return kv
}
