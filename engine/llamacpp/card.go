package llamacpp

import (
	"fmt"
	"os"
	"sync"

	"kvwin/engine"
	"kvwin/gguf"
)

// cardOnce reads the model card once per process and file; the file does
// not change while the engine has it mapped.
type cardOnce struct {
	once sync.Once
	card engine.ModelCard
	err  error
}

// Describe returns the served model's card from its GGUF header (read on
// the first call). Safe for concurrent use.
func (e *Engine) Describe() (engine.ModelCard, error) {
	e.card.once.Do(func() {
		st, err := os.Stat(e.cfg.ModelPath)
		if err != nil {
			e.card.err = fmt.Errorf("describe model: %w", err)
			return
		}
		info, err := gguf.Metadata(e.cfg.ModelPath)
		if err != nil {
			e.card.err = fmt.Errorf("describe model: %w", err)
			return
		}
		e.card.card = engine.ModelCard{
			Format: "gguf", Family: e.shape.Architecture, ParameterCount: e.shape.Params,
			Quantization: e.shape.FileType, Size: st.Size(), ModifiedAt: st.ModTime(),
			ChatTemplate: e.shape.ChatTemplate, Info: info,
		}
	})
	return e.card.card, e.card.err
}
