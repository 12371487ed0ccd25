package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"kvwin/gguf"
)

func newGGUFCmd() *cobra.Command {
	g := &cobra.Command{Use: "gguf", Short: "Inspect GGUF model files"}
	var asJSON bool
	inspect := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print a model's shape and KV cache cost",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := gguf.Read(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(inspectJSON{Shape: s, KVBytesPerToken: s.KVBytesPerToken("f16"), Crossover: s.Crossover()})
			}
			printShape(cmd.OutOrStdout(), s)
			return nil
		},
	}
	inspect.Flags().BoolVar(&asJSON, "json", false, "print JSON on standard output")
	g.AddCommand(inspect)
	return g
}

type inspectJSON struct {
	gguf.Shape
	KVBytesPerToken int `json:"kv_bytes_per_token"`
	Crossover       int `json:"crossover_tokens"`
}

func printShape(w io.Writer, s gguf.Shape) {
	fmt.Fprintf(w, "architecture   %s\n", s.Architecture)
	fmt.Fprintf(w, "params         %d (%.1f M)\n", s.Params, float64(s.Params)/1e6)
	fmt.Fprintf(w, "layers         %d\n", s.Layers)
	fmt.Fprintf(w, "embedding      %d\n", s.Embedding)
	fmt.Fprintf(w, "feed-forward   %d\n", s.FeedForward)
	fmt.Fprintf(w, "heads          %d (kv %d, head dim %d)\n", s.Heads, s.KVHeads, s.HeadDim)
	fmt.Fprintf(w, "context        %d\n", s.ContextLength)
	fmt.Fprintf(w, "vocabulary     %d\n", s.VocabSize)
	fmt.Fprintf(w, "file type      %s\n", s.FileType)
	fmt.Fprintf(w, "kv bytes/token %d (f16)\n", s.KVBytesPerToken("f16"))
	fmt.Fprintf(w, "crossover      %d tokens (prefill: weights term = attention term)\n", s.Crossover())
}
