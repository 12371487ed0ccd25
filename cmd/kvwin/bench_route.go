package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"kvwin/cmd/kvwin/app"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"kvwin/engine/llamaserver"
	"kvwin/router"
)

func newBenchRouteCmd() *cobra.Command {
	w := defaultRouteWorkload()
	var (
		nodes       int
		policies    []string
		asJSON      bool
		snapshots   bool
		nodeThreads int
		backends    []string
	)
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Routing policies side by side: a gateway over N kvwin nodes on llm-d's workload shape",
		Long: `Starts N kvwin nodes (subprocesses on the test model, --slots 2
--threads 1, each in its own process group and killed with the bench) and an
in-process gateway, and replays for each routing policy, on fresh nodes, the
same workload: groups of conversations sharing a long system prompt, each
conversation growing over its turns, turns in a seeded random order with at
most --concurrency in flight. The nodes' context per slot is sized to the
workload (its longest prompt, its answer and the output reservation), so
every turn is answered whole. Reports per policy: cached-token share,
prefill tokens (prompt − cached, summed), TTFT p50/p90, requests/s, errors,
and the oracle: the prefill a perfect router with an unbounded cache would
pay for the same turns, with the policy's ratio to it. "computed" is what the
backends themselves say they computed (timings.prompt_n of every answer,
summed by a proxy in front of each), whatever the gateway made of it.

With --backend llamaserver=URL (repeatable) it starts no nodes and runs the
workload against servers you started (llama-server, or kvwin nodes), on
127.0.0.1 or wherever they are: a fresh gateway per policy, and per policy
the conversations' text drawn anew (same lengths, same order), so that what
one policy left in the servers' slots or prompt caches is no help to the
next. Size the servers' slots for the workload: at least the context a node
would get (printed), e.g. llama-server -np 2 -c 2×that (the June 2025 build
divides -c among the slots) or --ctx-size that × slots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			urls, err := routeBackendURLs(backends)
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "kvwin-bench-route")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			ctx := cmd.Context()
			var results []routeResult
			if len(urls) > 0 {
				fmt.Fprintf(os.Stderr, "backends: %s (a node would get ctx %d per slot)\n", strings.Join(urls, ", "), w.nodeContext())
				for i, policy := range policies {
					pw := w
					pw.TextSalt = uint64(i + 1)
					res, err := benchRouteRun(ctx, dir, policy, urls, pw)
					if err != nil {
						return fmt.Errorf("policy %s: %w", policy, err)
					}
					results = append(results, res)
				}
			} else {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				model, err := ensureTinyModel(dir)
				if err != nil {
					return err
				}
				for _, policy := range policies {
					res, err := benchRoutePolicy(ctx, exe, model, dir, policy, nodes, nodeThreads, snapshots, w)
					if err != nil {
						return fmt.Errorf("policy %s: %w", policy, err)
					}
					results = append(results, res)
				}
			}
			printRouteTable(os.Stderr, results)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(results)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "kvwin nodes")
	f.StringArrayVar(&backends, "backend", nil, "llamaserver=URL of a server to run against instead of starting nodes (repeatable)")
	f.StringSliceVar(&policies, "policies", router.Policies(), "routing policies to compare")
	f.BoolVar(&asJSON, "json", false, "print JSON on standard output")
	f.BoolVar(&snapshots, "snapshots", true, "nodes keep KV snapshots of evicted conversations (kvwin's default)")
	f.IntVar(&nodeThreads, "node-threads", 1, "compute threads per node (keep nodes × this ≤ cores)")
	f.IntVar(&w.Groups, "groups", w.Groups, "conversation groups (each shares a system prompt)")
	f.IntVar(&w.PerGroup, "per-group", w.PerGroup, "conversations per group")
	f.IntVar(&w.Turns, "turns", w.Turns, "turns per conversation")
	f.IntVar(&w.SystemBytes, "system-tokens", w.SystemBytes, "system prompt length (the test model: a token per byte)")
	f.IntVar(&w.UserBytes, "user-tokens", w.UserBytes, "user message length")
	f.IntVar(&w.Concurrency, "concurrency", w.Concurrency, "turns in flight at once")
	f.Uint64Var(&w.Seed, "seed", w.Seed, "workload and order seed")
	return cmd
}

// routeBackendURLs checks the --backend specs: llamaserver=URL each.
func routeBackendURLs(specs []string) ([]string, error) {
	var out []string
	for _, s := range specs {
		u, ok := strings.CutPrefix(s, "llamaserver=")
		if !ok || u == "" {
			return nil, fmt.Errorf("--backend %q: want llamaserver=URL (a llama-server or a kvwin node)", s)
		}
		out = append(out, strings.TrimSuffix(u, "/"))
	}
	return out, nil
}

// benchRoutePolicy runs the workload once through a gateway with policy
// over fresh nodes.
func benchRoutePolicy(ctx context.Context, exe, model, dir, policy string, n, threads int, snapshots bool, w routeWorkload) (routeResult, error) {
	var urls []string
	nodeCtx := w.nodeContext()
	for i := range n {
		node, err := startNodeProcess(ctx, exe, model, filepath.Join(dir, fmt.Sprintf("%s-node%d", policy, i)), threads, nodeCtx, snapshots)
		if err != nil {
			return routeResult{}, err
		}
		defer node.stop()
		urls = append(urls, node.url)
	}
	fmt.Fprintf(os.Stderr, "policy %s: %d nodes (ctx %d per slot), %d conversations × %d turns\n", policy, n, nodeCtx, w.Groups*w.PerGroup, w.Turns)
	return benchRouteRun(ctx, dir, policy, urls, w)
}

// benchRouteRun runs the workload once through a fresh gateway with policy
// over the backends at urls, each behind a proxy counting what it computed.
func benchRouteRun(ctx context.Context, dir, policy string, urls []string, w routeWorkload) (routeResult, error) {
	var specs []string
	var proxies []*countingProxy
	for _, u := range urls {
		p, err := startCountingProxy(ctx, u)
		if err != nil {
			return routeResult{}, err
		}
		defer p.stop()
		proxies = append(proxies, p)
		specs = append(specs, "llamaserver="+p.url)
	}
	logs := &lineCounter{match: "cannot be true"}
	f := app.Config{Addr: "127.0.0.1:0", DataDir: dir, Window: "full", MaxBody: 8 << 20, ShutdownTimeout: 5 * time.Second,
		Backends: specs, Route: policy, LogLevel: slog.LevelWarn, LogOutput: io.MultiWriter(os.Stderr, logs)}
	gw, err := app.New(f)
	if err != nil {
		return routeResult{}, err
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Run(gctx) }()
	defer func() { cancel(); <-done }()
	count := 0
	res := w.run(ctx, gw.URL(), policy, func(t routeTurn) {
		count++
		status := "ok"
		if t.Err != nil {
			status = t.Err.Error()
		}
		fmt.Fprintf(os.Stderr, "\r  %3d/%d  conv %2d turn %d → %-16s prompt %5d cached %5d ttft %6.0f ms %s   ",
			count, w.Groups*w.PerGroup*w.Turns, t.Conv, t.Turn, t.Backend, t.Prompt, t.Cached, float64(t.TTFT.Microseconds())/1000, status)
	})
	fmt.Fprintln(os.Stderr)
	for _, p := range proxies {
		res.Computed += int(p.computed.Load())
	}
	res.Implausible = logs.count()
	// The oracle tokenizes with a backend, as the backends computed.
	tok, err := llamaserver.New(llamaserver.Config{BaseURL: urls[0]}, nil)
	if err != nil {
		return res, err
	}
	defer tok.Close()
	if res.OraclePrefill, err = w.oraclePrefill(ctx, tok, res.Turns); err != nil {
		return res, err
	}
	if res.OraclePrefill > 0 {
		res.PrefillVsOracle = float64(res.PrefillTokens) / float64(res.OraclePrefill)
		res.ComputedVsOracle = float64(res.Computed) / float64(res.OraclePrefill)
	}
	return res, nil
}

// lineCounter counts the lines written to it that contain match.
type lineCounter struct {
	match string
	mu    sync.Mutex
	n     int
	part  []byte // a line not yet ended
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		if bytes.Contains(l.part[:i], []byte(l.match)) {
			l.n++
		}
		l.part = l.part[i+1:]
	}
}

func (l *lineCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// nodeProcess is a kvwin node running as a subprocess.
type nodeProcess struct {
	cmd     *exec.Cmd
	url     string
	cleanup func() // after it stopped; nil for none
}

// startNodeProcess starts a bench node: `kvwin serve` on model with 2 slots
// of nodeCtx tokens (see startServeProcess).
func startNodeProcess(ctx context.Context, exe, model, dataDir string, threads, nodeCtx int, snapshots bool) (*nodeProcess, error) {
	args := []string{"--model", model, "--data-dir", dataDir, "--slots", "2", "--ctx", strconv.Itoa(nodeCtx), "--threads", strconv.Itoa(threads)}
	if !snapshots {
		args = append(args, "--no-snapshots")
	}
	return startServeProcess(ctx, exe, args)
}

// startServeProcess starts `kvwin serve` with args on a free loopback port,
// in its own process group, dying with this process (Pdeathsig), and waits
// until it answers /health.
func startServeProcess(ctx context.Context, exe string, args []string) (*nodeProcess, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args = append([]string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(port)}, args...)
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &nodeProcess{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(n.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			return nil, errors.New("node did not become healthy within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the node's process group: SIGTERM, then SIGKILL after 5s.
func (n *nodeProcess) stop() {
	pgid := n.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { n.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	if n.cleanup != nil {
		n.cleanup()
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func printRouteTable(w io.Writer, results []routeResult) {
	fmt.Fprintf(w, "%-13s %8s %9s %10s %10s %10s %9s %9s %6s %10s %10s %8s %7s %9s\n", "policy", "cached", "cached≥t3", "prefill",
		"computed", "oracle", "/oracle", "comp/orc", "moved", "ttft p50", "ttft p90", "req/s", "errors", "implaus.")
	for _, r := range results {
		fmt.Fprintf(w, "%-13s %7.1f%% %8.1f%% %10d %10d %10d %8.2fx %8.2fx %6d %8.0fms %8.0fms %8.2f %7d %9d\n", r.Policy, 100*r.CachedShare,
			100*r.CachedShareFrom3, r.PrefillTokens, r.Computed, r.OraclePrefill, r.PrefillVsOracle, r.ComputedVsOracle, r.Moved,
			r.TTFTP50, r.TTFTP90, r.RequestsPerS, r.Errors, r.Implausible)
	}
	for _, r := range results {
		if r.Policy == router.PolicyRoundRobin && r.PrefillTokens > 0 {
			for _, p := range results {
				if p.Policy == router.PolicyPrefix {
					fmt.Fprintf(w, "prefix / round-robin prefill tokens: %.2f", float64(p.PrefillTokens)/float64(r.PrefillTokens))
					if r.Computed > 0 {
						fmt.Fprintf(w, ", computed (backends' own count): %.2f", float64(p.Computed)/float64(r.Computed))
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
}
