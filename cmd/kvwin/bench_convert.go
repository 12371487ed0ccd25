package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/locomo"
)

// newBenchConvertCmd returns `kvwin bench convert`: another benchmark's
// conversations written in the LoCoMo format `kvwin bench recall` reads.
func newBenchConvertCmd() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "convert --from longmemeval FILE",
		Short: "Convert a conversation benchmark with evidence labels to the LoCoMo format",
		Long: `Reads FILE in another benchmark's format and writes, on standard output, a
JSON array of LoCoMo samples that kvwin bench recall --format locomo reads.

  longmemeval  LongMemEval (longmemeval_s / _m / _oracle .json): one sample
               per instance, its haystack sessions as sessions, speakers
               "user" and "assistant", one question whose evidence is the
               turns marked has_answer (abstention questions: category 5).`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from != "longmemeval" {
				return fmt.Errorf("--from %q: want longmemeval", from)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			samples, err := locomo.FromLongMemEval(bufio.NewReader(f))
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			w.WriteString("[")
			for i, s := range samples {
				if i > 0 {
					w.WriteString(",\n")
				}
				w.Write(s)
			}
			w.WriteString("]\n")
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&from, "from", "longmemeval", "the input's format: longmemeval")
	return cmd
}
