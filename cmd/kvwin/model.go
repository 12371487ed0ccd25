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
	var agent bool
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
			if agent {
				c = agentShape(cmd, c)
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
	f.BoolVar(&agent, "agent", false, "write the agent model `kvwin serve` serves by default: it answers \"Done.\" and ends, or the tool call its ask ends with (docs/serve.md)")
	return cmd
}

// agentShape is the agent model's shape, with the flags given on the
// command line (--ctx, --ff, --f32 and --seed; the rest of its shape is its
// program's, and Validate refuses what would break it).
func agentShape(cmd *cobra.Command, c gguf.TinyConfig) gguf.TinyConfig {
	a := gguf.DefaultAgentConfig()
	set := cmd.Flags().Changed
	for name, dst := range map[string]*int{"layers": &a.Layers, "embd": &a.Embedding, "heads": &a.Heads,
		"kv-heads": &a.KVHeads, "ff": &a.FeedForward, "ctx": &a.Context} {
		if set(name) {
			*dst = map[string]int{"layers": c.Layers, "embd": c.Embedding, "heads": c.Heads,
				"kv-heads": c.KVHeads, "ff": c.FeedForward, "ctx": c.Context}[name]
		}
	}
	a.F32, a.Seed, a.VocabPath, a.Template = c.F32, c.Seed, c.VocabPath, c.Template
	return a
}
