// Package ollamatest starts a real Ollama for tests: the `ollama serve` of
// the pinned version, on a free loopback port with models and home of its
// own, with kvwin's generated test model imported. Tests of the Ollama
// adapter and of a gateway over Ollama share it.
package ollamatest

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvwin/gguf"
)

// Install is how to build the binary: the pinned version, with the
// project's cgo flags (../shared/RESEARCH.md).
const Install = `CGO_CFLAGS="-O3 -march=x86-64-v3" CGO_CXXFLAGS="-O3 -march=x86-64-v3" GOFLAGS=-buildvcs=false go install github.com/ollama/ollama@v0.9.6`

// logs maps the URL of each running server to its log file.
var logs sync.Map

// CacheLoad is what Ollama's runner reported when it placed one request in
// its cache: the prompt's tokens and how many of them it reused.
type CacheLoad struct{ Prompt, Used int }

var cacheLoadLine = regexp.MustCompile(`msg="loading cache slot".* prompt=(\d+) used=(\d+)`)

// CacheLoads returns, in order, every placement the runner of the server
// at base logged so far ("loading cache slot … prompt=N used=M" in its
// debug log): Ollama's own account of its prefix reuse, which its API does
// not report (prompt_eval_count is the whole prompt, cached or not).
func CacheLoads(t testing.TB, base string) []CacheLoad {
	t.Helper()
	p, ok := logs.Load(base)
	if !ok {
		t.Fatalf("no ollama server of this test at %s", base)
	}
	data, err := os.ReadFile(p.(string))
	if err != nil {
		t.Fatal(err)
	}
	var out []CacheLoad
	for _, m := range cacheLoadLine.FindAllStringSubmatch(string(data), -1) {
		prompt, _ := strconv.Atoi(m[1])
		used, _ := strconv.Atoi(m[2])
		out = append(out, CacheLoad{Prompt: prompt, Used: used})
	}
	return out
}

// TinyModel is the name the test model is imported under.
const TinyModel = "kvwin-tiny"

// Start finds the ollama binary (skipping the test without one, failing it
// when CI is set), starts `ollama serve`, imports the test model and
// returns the server's base URL. Everything ends with the test.
func Start(t testing.TB, ctx context.Context) string {
	t.Helper()
	bin := find(t)
	base := start(t, ctx, bin)
	importTiny(t, ctx, bin, base)
	return base
}

// find returns the ollama binary on PATH or in $(go env GOPATH)/bin.
// Missing, the test is skipped, unless CI is set: CI must run it.
func find(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("ollama"); err == nil {
		return p
	}
	gopath := build.Default.GOPATH
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		gopath = string(bytes.TrimSpace(out))
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "ollama")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := "no ollama binary on PATH or in $(go env GOPATH)/bin; build it with: " + Install
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// start starts `ollama serve` on a free loopback port with models and
// home of its own, in its own process group, and returns its URL once it
// answers. The group is killed when the test ends, and the server dies with
// the test process (Pdeathsig) if that is killed first. Its log is printed
// if the test fails.
func start(t testing.TB, ctx context.Context, bin string) string {
	t.Helper()
	dir := t.TempDir()
	host := freeAddr(t)
	logPath := filepath.Join(dir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = ollamaEnv(host, dir,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"), "OLLAMA_NUM_PARALLEL=1", "OLLAMA_KEEP_ALIVE=30m",
		// Debug logs carry the runner's own count of reused prompt tokens
		// (CacheLoads): tests assert on it, never on timings.
		"OLLAMA_DEBUG=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// The whole group: serve and the model runner it started.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("ollama serve (pid %d) still running 10s after SIGKILL", cmd.Process.Pid)
		}
		logFile.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("ollama serve log (last 4 KiB):\n%s", tail(data, 4<<10))
			}
		}
	})

	base := "http://" + host
	logs.Store(base, logPath)
	t.Cleanup(func() { logs.Delete(base) })
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if version(ctx, base) == nil {
			return base
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("ollama serve exited before answering: %v", err)
		case <-deadline.C:
			t.Fatalf("ollama serve did not answer %s/api/version within 60s", base)
		case <-ctx.Done():
			t.Fatalf("ollama serve did not answer: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// version asks the server its version.
func version(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/version", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// importTiny writes the generated test model and imports it with
// `ollama create` from a Modelfile, as an operator would.
func importTiny(t testing.TB, ctx context.Context, bin, base string) {
	t.Helper()
	dir := t.TempDir()
	if err := gguf.WriteTiny(filepath.Join(dir, "model.gguf"), gguf.DefaultTinyConfig()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Modelfile"), []byte("FROM ./model.gguf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "create", TinyModel, "-f", "Modelfile")
	cmd.Dir = dir
	cmd.Env = ollamaEnv(strings.TrimPrefix(base, "http://"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create: %v\n%s", err, out)
	}
}

// ollamaEnv is the test's environment without OLLAMA_ variables of its
// own, plus the server's address, a home of its own (Ollama writes its key
// there) and extra.
func ollamaEnv(host, home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(append(env, "OLLAMA_HOST="+host, "HOME="+home), extra...)
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tail is the last n bytes of data.
func tail(data []byte, n int) []byte {
	if len(data) > n {
		return data[len(data)-n:]
	}
	return data
}
