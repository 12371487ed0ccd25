package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"kvwin/cmd/kvwin/bench/load"
	"kvwin/engine/queue"
)

func newBenchLoadCmd() *cobra.Command {
	f := load.Options{Workload: load.DefaultWorkload()}
	var tenants []string
	var class string
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Many streaming clients against one server: TTFT, responses by status, goroutines and RSS before and after",
		Long: `Runs --clients streaming chat clients on loopback against --target for
--duration. Each client holds a conversation of a few turns and sends its
next turn as soon as the last one ended (a 429 is waited out, per
Retry-After, at most a second). Reports TTFT p50/p99 of the completed
streams, responses by status (stream_error: a 200 whose stream ended with an
error or was cut; transport_error: no response), the errors other than 429,
and the target's goroutines and resident memory from its /metrics before the
load and after it (once in-flight work settled, at most --settle).

Without --target, a kvwin serve (the test model, --slots, --queue, --threads)
is started as a subprocess on a free port, so its numbers are its own.

Tenants and classes (a mixed load). Each --tenants value (repeatable) is one
tenant's load, NAME:OPT=V,OPT=V…, all running at once:
  mode=burst,requests=N     N requests sent at once
  mode=serial,requests=N    N requests one after another
  mode=flood,clients=N      N clients sending back to back for --duration (the default mode)
  class=interactive|batch   the tenant's class (default --class), sent as X-Kvwin-Priority
  weight=W                  its fair-share weight (default 1)
  max-tokens=N              tokens per answer (default --max-tokens)
  key=KEY                   its API key (with --target; a started server gets keys of its own)
Every request is a new conversation (--system-tokens, --user-tokens). The
report gives requests, completed streams, completed tokens and TTFT p50/p99
per tenant and per class (--json: {"runs": [...]}, one run per server).
Without --target, each run starts its own server with the tenants' keys
(their class and weight): --queue-order fair,fifo runs the load against one
server per order, side by side; --alone NAME first runs that tenant's load
by itself and reports its TTFT p99 in each run over its p99 alone. Flood
tenants of one class and weight are compared by completed tokens (spread:
(most - least) / most). The acceptance of issue 51:

  kvwin bench load --slots 2 --queue-order fair,fifo --alone B \
    --tenants A:mode=burst,requests=64,class=batch,max-tokens=64 \
    --tenants B:mode=serial,requests=16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			def := load.Tenant{MaxTokens: f.Workload.MaxTokens}
			var err error
			if def.Class, err = queue.ParseClass(class); err != nil {
				return fmt.Errorf("--class: %w", err)
			}
			for _, s := range tenants {
				t, err := load.ParseTenant(s, def)
				if err != nil {
					return err
				}
				f.Tenants = append(f.Tenants, t)
			}
			return load.Bench(cmd.Context(), f, cmd.OutOrStdout(), os.Stderr)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.Workload.Clients, "clients", f.Workload.Clients, "concurrent streaming clients")
	fl.DurationVar(&f.Workload.Duration, "duration", f.Workload.Duration, "how long clients keep sending")
	fl.StringVar(&f.Target, "target", "", "server base URL (default: start kvwin serve on a free port)")
	fl.BoolVar(&f.JSON, "json", false, "print JSON on standard output")
	fl.IntVar(&f.Workload.MaxTokens, "max-tokens", f.Workload.MaxTokens, "tokens per answer")
	fl.IntVar(&f.Workload.UserBytes, "user-tokens", f.Workload.UserBytes, "user message length (the test model: a token per byte)")
	fl.IntVar(&f.Workload.SystemBytes, "system-tokens", f.Workload.SystemBytes, "system prompt length")
	fl.IntVar(&f.Workload.Turns, "turns", f.Workload.Turns, "turns per conversation before a client starts a new one")
	fl.IntVar(&f.Slots, "slots", 4, "without --target: the started server's --slots")
	fl.IntVar(&f.Queue, "queue", 64, "without --target: the started server's --queue")
	fl.IntVar(&f.Threads, "threads", 0, "without --target: the started server's --threads (default: its own)")
	fl.DurationVar(&f.Settle, "settle", 10*time.Second, "after the load, how long to wait for the target's goroutines to return to their level before it")
	fl.StringArrayVar(&tenants, "tenants", nil, "a tenant's load, NAME:mode=burst|serial|flood,requests=N,clients=N,class=C,weight=W,max-tokens=N,key=KEY (repeatable; see above)")
	fl.StringVar(&class, "class", "interactive", "with --tenants: the class of a tenant that names none")
	fl.StringSliceVar(&f.Orders, "queue-order", nil, "with --tenants, without --target: the started servers' --queue-order, one run each (fair,fifo: side by side; default fair)")
	fl.StringSliceVar(&f.Alone, "alone", nil, "with --tenants: also run these tenants' loads alone first, and compare their TTFT p99")
	return cmd
}
