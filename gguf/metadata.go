package gguf

import (
	"fmt"
	"os"

	"github.com/ollama/ollama/fs/ggml"
)

// Metadata returns the scalar key/value pairs of the GGUF file at path
// (strings, numbers, booleans; arrays such as the vocabulary are left out),
// plus "general.parameter_count", the weights counted from the tensor
// table. It is what Ollama's /api/show reports as model_info. It reads no
// tensor data.
func Metadata(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", path, err)
	}
	defer f.Close()
	g, err := ggml.Decode(f, 0)
	if err != nil {
		return nil, fmt.Errorf("read gguf %q: %w", path, err)
	}
	out := map[string]any{}
	for k, v := range g.KV() {
		switch v.(type) {
		case string, bool, uint8, int8, uint16, int16, uint32, int32, uint64, int64, float32, float64:
			out[k] = v
		}
	}
	var params uint64
	for _, t := range g.Tensors().Items() {
		params += t.Elements()
	}
	out["general.parameter_count"] = params
	return out, nil
}
