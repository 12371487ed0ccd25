package engine

import "time"

// ModelCard describes the file of the model a backend serves, as Ollama's
// /api/show, /api/tags and /api/ps report it.
type ModelCard struct {
	Format         string    // "gguf"
	Family         string    // the architecture, e.g. "llama"
	ParameterCount uint64    // weights, from the tensor table
	Quantization   string    // the file type, e.g. "Q4_K_M", "F32"
	Size           int64     // bytes of the model file
	ModifiedAt     time.Time // the model file's modification time
	ChatTemplate   string    // the file's chat template (tokenizer.chat_template); "" if none
	// Info holds the file's scalar metadata (general.architecture,
	// llama.context_length, …; no arrays) plus general.parameter_count.
	Info map[string]any
}

// ModelDescriber is implemented by backends that can describe their model's
// file (the embedded engine). Describe reads the file's header on its first
// call and may block on disk; it is safe for concurrent use.
type ModelDescriber interface {
	Describe() (ModelCard, error)
}
