package main

import "github.com/spf13/cobra"

// benchCommands lists the subcommands of kvwin bench.
func benchCommands() []*cobra.Command {
	return []*cobra.Command{newBenchFleetCmd(), newBenchLoadCmd(), newBenchOverheadCmd(), newBenchPrefillCmd(), newBenchRecallCmd(), newBenchConvertCmd(), newBenchRouteCmd(), newBenchTTFTCmd()}
}
