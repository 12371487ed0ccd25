//go:build linux

package ollama

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/gguf"
)

// The test against a real Ollama needs the binary of the pinned version,
// built with the project's cgo flags (../shared/RESEARCH.md):
//
//	CGO_CFLAGS="-O3 -march=x86-64-v3" CGO_CXXFLAGS="-O3 -march=x86-64-v3" \
//	GOFLAGS=-buildvcs=false go install github.com/ollama/ollama@v0.9.6
const installOllama = `CGO_CFLAGS="-O3 -march=x86-64-v3" CGO_CXXFLAGS="-O3 -march=x86-64-v3" GOFLAGS=-buildvcs=false go install github.com/ollama/ollama@v0.9.6`

// tinyModel is the name the test model is imported under.
const tinyModel = "kvwin-tiny"

// TestRealOllama runs a two-turn conversation through the adapter against
// a real `ollama serve` on the generated test model and checks Ollama's
// prefix cache at work: turn 2 (turn 1, its answer and a short new
// message) evaluates its prompt far faster than turn 1, and the adapter
// estimated almost all of turn 1 as cached. The duration is Ollama's own
// prompt_eval_duration, compared within one run with a generous margin.
func TestRealOllama(t *testing.T) {
	bin := findOllama(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := startOllama(t, ctx, bin)
	importTiny(t, ctx, bin, base)

	b, err := New(Config{
		BaseURL: base, Model: tinyModel, Slots: 1,
		// One compute thread: the machine's 2 cores are shared, and ggml
		// threads spin-wait.
		Options: map[string]any{"num_thread": 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	t.Run("unknown model", func(t *testing.T) {
		nb, err := New(Config{BaseURL: base, Model: "no-such-model"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nb.Close()
		_, err = nb.Generate(ctx, engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Slot: -1}, nil)
		if !errors.Is(err, engine.ErrUnknownModel) {
			t.Fatalf("error %v, want engine.ErrUnknownModel", err)
		}
	})

	// About 2,000 tokens: the test model's vocabulary is one token a byte.
	system := engine.Message{Role: engine.RoleSystem, Content: longText(1900)}
	turn1 := []engine.Message{system, {Role: engine.RoleUser, Content: "Describe the harbour at dawn, the boats, the gulls and the light."}}
	sampling := engine.Sampling{Temperature: 0, TopK: 40, TopP: 1, MinP: 0, RepeatPenalty: 1, RepeatLastN: 64, Seed: 42}

	r1, first1 := generate(t, ctx, b, turn1, sampling)
	turn2 := append(append([]engine.Message(nil), turn1...),
		engine.Message{Role: engine.RoleAssistant, Content: r1.Text},
		engine.Message{Role: engine.RoleUser, Content: "And at dusk?"})
	r2, first2 := generate(t, ctx, b, turn2, sampling)

	t1, t2 := r1.Timings, r2.Timings
	t.Logf("turn 1: prompt %d tokens (estimated cached %d), prompt_eval_duration %v, first token %v, %d generated",
		t1.PromptTokens, t1.CachedTokens, t1.PromptEval, t1.FirstToken, t1.GeneratedTokens)
	t.Logf("turn 2: prompt %d tokens (estimated cached %d), prompt_eval_duration %v, first token %v, %d generated",
		t2.PromptTokens, t2.CachedTokens, t2.PromptEval, t2.FirstToken, t2.GeneratedTokens)
	t.Logf("prompt_eval_duration turn 1 / turn 2 = %.1f", float64(t1.PromptEval)/float64(max(t2.PromptEval, 1)))

	if info := b.Info(); info.ContextSlot != gguf.DefaultTinyConfig().Context || info.Slots != 1 || info.Model != tinyModel {
		t.Errorf("Info %+v, want the model's context %d, 1 slot, model %s", info, gguf.DefaultTinyConfig().Context, tinyModel)
	}
	if t1.PromptTokens < 1900 || t2.PromptTokens <= t1.PromptTokens {
		t.Errorf("prompt tokens %d then %d: want ~2,000, then more", t1.PromptTokens, t2.PromptTokens)
	}
	if t1.PromptEval <= 0 || t2.PromptEval <= 0 {
		t.Fatalf("prompt_eval_duration %v, %v: Ollama reported none", t1.PromptEval, t2.PromptEval)
	}
	if t2.PromptEval >= t1.PromptEval/3 {
		t.Errorf("turn 2 evaluated its prompt in %v, turn 1 in %v: want under a third, Ollama's prefix cache at work",
			t2.PromptEval, t1.PromptEval)
	}
	if t1.CachedTokens != 0 {
		t.Errorf("turn 1: %d tokens estimated cached, want 0 (nothing ran before)", t1.CachedTokens)
	}
	if !t2.CachedEstimated || !first2.CachedEstimated || !first1.CachedEstimated {
		t.Errorf("CachedEstimated %v (first events %v, %v), want true", t2.CachedEstimated, first1.CachedEstimated, first2.CachedEstimated)
	}
	if t2.CachedTokens < t1.PromptTokens*9/10 || t2.CachedTokens >= t2.PromptTokens {
		t.Errorf("turn 2: %d tokens estimated cached of %d, want at least 90%% of turn 1's %d and less than the prompt",
			t2.CachedTokens, t2.PromptTokens, t1.PromptTokens)
	}
}

// generate runs one turn and returns the result and the first event's
// timings.
func generate(t *testing.T, ctx context.Context, b *Backend, msgs []engine.Message, s engine.Sampling) (engine.Result, engine.Timings) {
	t.Helper()
	var first engine.Timings
	events := 0
	res, err := b.Generate(ctx, engine.Request{Messages: msgs, MaxTokens: 16, Sampling: s, Slot: -1}, func(ev engine.Event) error {
		if ev.First != (events == 0) {
			t.Errorf("event %d: First %v", events, ev.First)
		}
		if ev.First {
			first = ev.Timings
		}
		events++
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return res, first
}

// longText is n bytes of varied, deterministic prose.
func longText(n int) string {
	words := []string{"the", "harbour", "wakes", "slowly", "while", "nets", "dry", "on", "stone", "walls", "and",
		"a", "bell", "rings", "twice", "over", "grey", "water", "where", "gulls", "circle", "boats", "at", "anchor"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/len(words))%len(words)])
		if i%13 == 12 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

// findOllama returns the ollama binary on PATH or in $(go env GOPATH)/bin.
// Missing, the test is skipped, unless CI is set: CI must run it.
func findOllama(t *testing.T) string {
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
	msg := "no ollama binary on PATH or in $(go env GOPATH)/bin; build it with: " + installOllama
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startOllama starts `ollama serve` on a free loopback port with models and
// home of its own, in its own process group, and returns its URL once it
// answers. The group is killed when the test ends, and the server dies with
// the test process (Pdeathsig) if that is killed first. Its log is printed
// if the test fails.
func startOllama(t *testing.T, ctx context.Context, bin string) string {
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
		"OLLAMA_MODELS="+filepath.Join(dir, "models"), "OLLAMA_NUM_PARALLEL=1", "OLLAMA_KEEP_ALIVE=30m")
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
func importTiny(t *testing.T, ctx context.Context, bin, base string) {
	t.Helper()
	dir := t.TempDir()
	if err := gguf.WriteTiny(filepath.Join(dir, "model.gguf"), gguf.DefaultTinyConfig()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Modelfile"), []byte("FROM ./model.gguf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "create", tinyModel, "-f", "Modelfile")
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
func freeAddr(t *testing.T) string {
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
