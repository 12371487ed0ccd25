// Command kvwin is a self-hosted inference server for long conversations.
//
//	kvwin serve                 serve the OpenAI API from the embedded engine
//	kvwin model tiny --out F    write the synthetic test model
//	kvwin gguf inspect F        print a model's shape and KV cost
//	kvwin bench …               measurements
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/app"
)

func main() {
	// llama.cpp logs through the default slog logger; keep its loader
	// chatter at warnings. kvwin's own loggers are passed explicitly.
	slog.SetDefault(newLogger(slog.LevelWarn))
	if err := newRootCmd().Execute(); err != nil {
		if !errors.Is(err, errLogged) {
			fmt.Fprintln(os.Stderr, "kvwin:", err)
		}
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kvwin",
		Short:         "A self-hosted inference server for long conversations",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newModelCmd(), newGGUFCmd(), newBenchCmd())
	return root
}

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Measure kvwin (results go to standard output and files; progress to standard error)"}
	bench.AddCommand(benchCommands()...)
	return bench
}

// newLogger returns the process logger: text on standard error.
func newLogger(level slog.Level) *slog.Logger { return app.NewLogger(level) }

// ensureTinyModel returns the test model under dir, writing it first if
// needed (app.EnsureTinyModel).
func ensureTinyModel(dir string) (string, error) { return app.EnsureTinyModel(dir) }
