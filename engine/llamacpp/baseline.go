package llamacpp

import (
	"fmt"
	"time"

	"github.com/ollama/ollama/llama"
)

// BaselineBatch is the batch size of the baseline: llama.cpp's default
// n_batch, what its own tools decode a prompt in.
const BaselineBatch = 512

// Baseline is llama.cpp driven directly through the binding, with none of the
// engine around it: one context of the engine's size (Slots × Ctx cells), a
// prompt decoded in batches of BaselineBatch tokens, logits for the last token
// only. kvwin bench prefill times it next to the engine in the same run: it is
// the ceiling a cold prefill can reach. Not safe for concurrent use.
type Baseline struct {
	model *llama.Model
	lctx  *llama.Context
	batch *llama.Batch
}

// NewBaseline loads cfg's model into a context of its own, sized as New would
// size the engine's (Slots, Ctx, Threads, FlashAttention). It blocks while
// loading.
func NewBaseline(cfg Config) (*Baseline, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkBindingLayout(); err != nil {
		return nil, err
	}
	backendInit.Do(llama.BackendInit)
	model, err := llama.LoadModelFromFile(cfg.ModelPath, llama.ModelParams{UseMmap: true, Progress: func(float32) {}})
	if err != nil {
		return nil, fmt.Errorf("load model %q: %w", cfg.ModelPath, err)
	}
	params := llama.NewContextParams(cfg.Slots*cfg.Ctx, BaselineBatch, cfg.Slots, cfg.Threads, cfg.FlashAttention, "")
	lctx, err := llama.NewContextWithModel(model, params)
	if err != nil {
		llama.FreeModel(model)
		return nil, fmt.Errorf("create baseline context for %q: %w", cfg.ModelPath, err)
	}
	batch, err := llama.NewBatch(BaselineBatch, 1, 0)
	if err != nil {
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, fmt.Errorf("baseline batch: %w", err)
	}
	return &Baseline{model: model, lctx: lctx, batch: batch}, nil
}

// Prefill empties the context, decodes prompt into sequence 0 and returns
// how long the decoding took, from the first token added to the batch to the
// last decode's return (the last token's logits are then ready). It blocks.
func (b *Baseline) Prefill(prompt []int) (time.Duration, error) {
	if len(prompt) == 0 {
		return 0, fmt.Errorf("baseline: empty prompt")
	}
	b.lctx.KvCacheClear()
	start := time.Now()
	for i := 0; i < len(prompt); i += BaselineBatch {
		b.batch.Clear()
		end := min(i+BaselineBatch, len(prompt))
		for j := i; j < end; j++ {
			b.batch.Add(prompt[j], nil, j, j == len(prompt)-1, 0)
		}
		if err := b.lctx.Decode(b.batch); err != nil {
			return 0, fmt.Errorf("baseline: decode tokens %d..%d: %w", i, end-1, err)
		}
	}
	b.lctx.Synchronize()
	return time.Since(start), nil
}

// Close frees the context and the model.
func (b *Baseline) Close() {
	b.batch.Free()
	freeContext(b.lctx)
	llama.FreeModel(b.model)
}
