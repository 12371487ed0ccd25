package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/locomo"
)

// newBenchConvertCmd returns `kvwin bench convert`: another benchmark's
// conversations written in the LoCoMo format `kvwin bench recall` reads,
// restyled on request.
func newBenchConvertCmd() *cobra.Command {
	var from, restyle string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "convert --from longmemeval|locomo FILE [--restyle texting --seed N]",
		Short: "Convert a conversation benchmark with evidence labels to the LoCoMo format",
		Long: `Reads FILE in another benchmark's format and writes, on standard output, a
JSON array of LoCoMo samples that kvwin bench recall --format locomo reads.

  longmemeval  LongMemEval (longmemeval_s / _m / _oracle .json): one sample
               per instance, its haystack sessions as sessions, speakers
               "user" and "assistant", one question whose evidence is the
               turns marked has_answer (abstention questions: category 5).
  locomo       LoCoMo itself (to restyle it).

--restyle texting rewrites the turns as a messaging app's chat, a stress set
for rules developed on written dialogue: each sentence its own message
(evidence names all of a turn's messages), lower case, end punctuation
dropped (a question mark in half the messages), texting spellings, typos in
7% of the longer words, an emoji or "lol" after a quarter of the messages.
Questions stay as written. The same --seed gives the same file.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from != "longmemeval" && from != "locomo" {
				return fmt.Errorf("--from %q: want longmemeval or locomo", from)
			}
			if restyle != "" && restyle != "texting" {
				return fmt.Errorf("--restyle %q: want texting", restyle)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			out, err := convertBench(bufio.NewReader(f), from, restyle, seed)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			w.Write(out)
			w.WriteString("\n")
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&from, "from", "longmemeval", "the input's format: longmemeval or locomo")
	cmd.Flags().StringVar(&restyle, "restyle", "", "rewrite the turns in a style: texting (see above); none by default")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "--restyle: the seed of its choices")
	return cmd
}

// convertBench reads r in the format from and returns the LoCoMo array,
// restyled as restyle says ("" keeps the turns as they are).
func convertBench(r io.Reader, from, restyle string, seed uint64) ([]byte, error) {
	var data []byte
	switch from {
	case "longmemeval":
		samples, err := locomo.FromLongMemEval(r)
		if err != nil {
			return nil, err
		}
		data, err = json.Marshal(samples)
		if err != nil {
			return nil, err
		}
		if restyle == "" {
			return data, nil
		}
	default:
		var err error
		if data, err = io.ReadAll(r); err != nil {
			return nil, err
		}
	}
	samples, err := locomo.Read(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if restyle == "texting" {
		samples = locomo.Texting(samples, seed)
	}
	return locomo.Write(samples)
}
