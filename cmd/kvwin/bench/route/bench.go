package route

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/bench/node"
	"kvwin/engine/llamaserver"
	"kvwin/router"
)

// Options are what a bench route run measures on, besides the workload.
type Options struct {
	// Policies are the routing policies, run one after the other.
	Policies []string
	// Backends are base URLs of servers to run against; none: start Nodes
	// kvwin nodes (subprocesses of this executable on the test model) per
	// policy, with NodeThreads compute threads each, keeping KV snapshots
	// if Snapshots.
	Backends           []string
	Nodes, NodeThreads int
	Snapshots          bool
}

// Bench runs w once per policy and returns the results in policy order.
// Against Backends, each policy's conversations get text of their own
// (Workload.TextSalt), so that what one policy left in the servers is no
// help to the next; otherwise each policy gets fresh nodes. Progress goes
// to standard error.
func Bench(ctx context.Context, w Workload, o Options) ([]Result, error) {
	dir, err := os.MkdirTemp("", "kvwin-bench-route")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var results []Result
	if len(o.Backends) > 0 {
		fmt.Fprintf(os.Stderr, "backends: %s (a node would get ctx %d per slot)\n", strings.Join(o.Backends, ", "), w.NodeContext())
		for i, policy := range o.Policies {
			pw := w
			pw.TextSalt = uint64(i + 1)
			res, err := benchRouteRun(ctx, dir, policy, o.Backends, pw)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", policy, err)
			}
			results = append(results, res)
		}
		return results, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	model, err := app.EnsureTinyModel(dir)
	if err != nil {
		return nil, err
	}
	for _, policy := range o.Policies {
		res, err := benchRoutePolicy(ctx, exe, model, dir, policy, o.Nodes, o.NodeThreads, o.Snapshots, w)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", policy, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// benchRoutePolicy runs the workload once through a gateway with policy
// over fresh nodes.
func benchRoutePolicy(ctx context.Context, exe, model, dir, policy string, n, threads int, snapshots bool, w Workload) (Result, error) {
	var urls []string
	nodeCtx := w.NodeContext()
	for i := range n {
		p, err := startNodeProcess(ctx, exe, model, filepath.Join(dir, fmt.Sprintf("%s-node%d", policy, i)), threads, nodeCtx, snapshots)
		if err != nil {
			return Result{}, err
		}
		defer p.Stop()
		urls = append(urls, p.URL)
	}
	fmt.Fprintf(os.Stderr, "policy %s: %d nodes (ctx %d per slot), %d conversations × %d turns\n", policy, n, nodeCtx, w.Groups*w.PerGroup, w.Turns)
	return benchRouteRun(ctx, dir, policy, urls, w)
}

// benchRouteRun runs the workload once through a fresh gateway with policy
// over the backends at urls, each behind a proxy counting what it computed.
func benchRouteRun(ctx context.Context, dir, policy string, urls []string, w Workload) (Result, error) {
	var specs []string
	var proxies []*countingProxy
	for _, u := range urls {
		p, err := startCountingProxy(ctx, u)
		if err != nil {
			return Result{}, err
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
		return Result{}, err
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Run(gctx) }()
	defer func() { cancel(); <-done }()
	count := 0
	res := w.Run(ctx, gw.URL(), policy, func(t Turn) {
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

// startNodeProcess starts a bench node: `kvwin serve` on model with 2 slots
// of nodeCtx tokens (see node.Start).
func startNodeProcess(ctx context.Context, exe, model, dataDir string, threads, nodeCtx int, snapshots bool) (*node.Process, error) {
	args := []string{"--model", model, "--data-dir", dataDir, "--slots", "2", "--ctx", strconv.Itoa(nodeCtx), "--threads", strconv.Itoa(threads)}
	if !snapshots {
		args = append(args, "--no-snapshots")
	}
	return node.Start(ctx, exe, args)
}

// PrintTable writes the results' table, and the ratio of prefix's prefill
// to round-robin's when both ran.
func PrintTable(w io.Writer, results []Result) {
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
