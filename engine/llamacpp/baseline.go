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
	model, lctx, err := loadContext(cfg, BaselineBatch)
	if err != nil {
		return nil, err
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
	return b.PrefillBeside(prompt, nil)
}

// PrefillBeside is Prefill with other already in the context, as sequence 1
// (decoded first, untimed, into the lowest cells): llama.cpp attends over
// every cell up to the highest one in use, another sequence's included, so
// this is the ceiling for a prompt beside another slot's KV. The context
// must have room for two sequences (Slots ≥ 2) when other is not empty.
func (b *Baseline) PrefillBeside(prompt, other []int) (time.Duration, error) {
	if len(prompt) == 0 {
		return 0, fmt.Errorf("baseline: empty prompt")
	}
	b.lctx.KvCacheClear()
	if err := b.decode(other, 1); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := b.decode(prompt, 0); err != nil {
		return 0, err
	}
	b.lctx.Synchronize()
	return time.Since(start), nil
}

// decode decodes tokens into sequence seq in batches of BaselineBatch, with
// logits for the last token only.
func (b *Baseline) decode(tokens []int, seq int) error {
	for i := 0; i < len(tokens); i += BaselineBatch {
		b.batch.Clear()
		end := min(i+BaselineBatch, len(tokens))
		for j := i; j < end; j++ {
			b.batch.Add(tokens[j], nil, j, j == len(tokens)-1, seq)
		}
		if err := decode(b.lctx, b.batch); err != nil {
			return fmt.Errorf("baseline: decode tokens %d..%d of sequence %d: %w", i, end-1, seq, err)
		}
	}
	return nil
}

// Close frees the context and the model.
func (b *Baseline) Close() {
	b.batch.Free()
	freeContext(b.lctx)
	llama.FreeModel(b.model)
}
