package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"kvwin/gguf"
)

func newModelCmd() *cobra.Command {
	model := &cobra.Command{Use: "model", Short: "Model files"}
	model.AddCommand(newModelTinyCmd())
	return model
}

func newModelTinyCmd() *cobra.Command {
	c := gguf.DefaultTinyConfig()
	var out, templateFile string
	cmd := &cobra.Command{
		Use:   "tiny --out FILE",
		Short: "Write the synthetic test model (llama architecture, deterministic random weights, byte-level vocabulary)",
		Long: `Write kvwin's test model: a small llama-architecture GGUF whose weights are a
pure function of its shape and seed, with a byte-level vocabulary that covers any
UTF-8 text and a ChatML chat template. Its text is meaningless; its inference is
real llama.cpp work, so token counts, KV reuse and TTFT scaling are real.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out FILE is required")
			}
			if templateFile != "" {
				b, err := os.ReadFile(templateFile)
				if err != nil {
					return fmt.Errorf("--template: %w", err)
				}
				c.Template = string(b)
			}
			if err := gguf.WriteTiny(out, c); err != nil {
				return err
			}
			s := c.Shape()
			fi, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)\n", out, fi.Size())
			printShape(cmd.OutOrStdout(), s)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "file to write (required)")
	f.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks")
	f.IntVar(&c.Embedding, "embd", c.Embedding, "embedding (residual) width")
	f.IntVar(&c.Heads, "heads", c.Heads, "attention heads")
	f.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads")
	f.IntVar(&c.FeedForward, "ff", c.FeedForward, "feed-forward width")
	f.IntVar(&c.Context, "ctx", c.Context, "trained context length")
	f.Uint64Var(&c.Seed, "seed", c.Seed, "weight seed")
	f.BoolVar(&c.F32, "f32", c.F32, "store matrices as f32 instead of f16")
	f.StringVar(&c.VocabPath, "vocab", "", "a real vocabulary: a directory with encoder.json and vocab.bpe (Llama 3), or a SentencePiece tokenizer.model (Gemma)")
	f.StringVar(&templateFile, "template", "", "a file holding the chat template (Jinja) to write instead of ChatML")
	return cmd
}
