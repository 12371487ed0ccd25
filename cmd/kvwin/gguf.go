package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"kvwin/attention"
	"kvwin/gguf"
)

func newGGUFCmd() *cobra.Command {
	g := &cobra.Command{Use: "gguf", Short: "Inspect GGUF model files"}
	var (
		asJSON    bool
		vram      string
		slots     int
		cacheType string
	)
	inspect := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print a model's shape and KV cache cost; with --vram, how many tokens fit per slot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := gguf.Read(args[0])
			if err != nil {
				return err
			}
			out := inspectJSON{Shape: s, KVBytesPerToken: s.KVBytesPerToken(cacheType), Crossover: s.Crossover()}
			if vram != "" {
				bytes, err := attention.ParseSize(vram)
				if err != nil {
					return fmt.Errorf("--vram: %w", err)
				}
				cfg := attention.PlanConfig{VRAM: bytes, Slots: slots, CacheType: cacheType}
				if fi, err := os.Stat(args[0]); err == nil {
					cfg.WeightBytes = uint64(fi.Size()) // the file is the weights plus a little metadata
				}
				plan, err := attention.NewPlan(s, cfg)
				if err != nil {
					return err
				}
				out.Plan = &plan
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			printShape(cmd.OutOrStdout(), s)
			if out.Plan != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				return out.Plan.WriteText(cmd.OutOrStdout())
			}
			return nil
		},
	}
	f := inspect.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON on standard output")
	f.StringVar(&vram, "vram", "", "device memory for the model, e.g. 24GiB: plan tokens per slot and prefill cost")
	f.IntVar(&slots, "slots", 1, "slots sharing the KV cache (with --vram)")
	f.StringVar(&cacheType, "cache-type", "f16", "KV cache element type: f16, q8_0, q4_0")
	g.AddCommand(inspect)
	return g
}

type inspectJSON struct {
	gguf.Shape
	KVBytesPerToken int             `json:"kv_bytes_per_token"`
	Crossover       int             `json:"crossover_tokens"`
	Plan            *attention.Plan `json:"plan,omitempty"`
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
