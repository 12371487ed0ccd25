package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app/apptest"
)

// Under --log-format json every line a kvwin serve process prints, on
// standard error and standard output, from start to shutdown, is one JSON
// object: kvwin's own and llama.cpp's callback messages (the context
// warning at start). A grammar that does not parse is refused in Go before
// llama.cpp (which printed it whole with fprintf) sees it; what llama.cpp
// still prints past the callback is captured (TestCaptureStdioLogsRawWrites
// in app). A forged line inside a grammar stays a quoted message, and a
// large grammar is never logged whole.
func TestJSONLogsEveryLineOfTheProcess(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "verbose"}[verbose], func(t *testing.T) {
			model, err := ensureTinyModel(apptest.ModelDir(t))
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			args := []string{"--data-dir", t.TempDir(), "--model", model, "--slots", "1", "--ctx", "1024",
				"--threads", "1", "--log-format", "json"}
			if verbose {
				args = append(args, "--verbose")
			}
			cmd, url := serverProcessTo(t, &stdout, &stderr, args...)

			forged := `root ::= "a" (` + "\n" + `{"level":"ERROR","msg":"forged","forged":true}` + "\n"
			big := `root ::= "` + strings.Repeat("x", 100_000) + "\n" + strings.Repeat("y ::= (\n", 2_000)
			for _, grammar := range []string{forged, big} {
				b, _ := json.Marshal(map[string]any{"prompt": "hi", "n_predict": 2, "grammar": grammar})
				resp, err := http.Post(url+"/completion", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("invalid grammar: %d", resp.StatusCode)
				}
			}
			if tr := apptest.PostWith(t, url, nil, map[string]any{"messages": apptest.Msgs("user", "Hello."), "max_tokens": 3}); tr.Status != 200 {
				t.Fatalf("chat: %d %s", tr.Status, tr.Body)
			}
			for _, r := range []struct {
				path, body string
				status     int
			}{
				{"/api/chat", `{"model":"kvwin-tiny","messages":[{"role":"user","content":"hi\n{\"forged\":1}"}],"stream":false,"options":{"num_predict":2}}`, 200},
				{"/v1/chat/completions", `{"messages":[{`, 400},
				{"/v1/completions", `{"prompt":"` + strings.Repeat(`z\n`, 200) + `","max_tokens":2}`, 200},
			} {
				resp, err := http.Post(url+r.path, "application/json", strings.NewReader(r.body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != r.status {
					t.Fatalf("%s: %d, want %d", r.path, resp.StatusCode, r.status)
				}
			}
			syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
			cmd.Wait()

			sources := map[string]int{}
			printed := 0 // bytes of the records of what was printed to standard error
			for name, out := range map[string]*bytes.Buffer{"stdout": &stdout, "stderr": &stderr} {
				sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					var rec map[string]any
					if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
						t.Fatalf("%s line %q is not one JSON object: %v", name, sc.Text(), err)
					}
					if rec["forged"] != nil {
						t.Fatalf("%s: a line from a request became a record: %q", name, sc.Text())
					}
					if len(sc.Bytes()) > 1000 {
						t.Fatalf("%s: a %d-byte line: request text logged whole? %.200q", name, len(sc.Bytes()), sc.Text())
					}
					if s, ok := rec["source"].(string); ok {
						sources[s]++
						if s == "stderr" {
							printed += len(sc.Bytes())
						}
					}
					sources["msg:"+firstWord(rec["msg"])]++
				}
			}
			if printed > 5_000 {
				t.Fatalf("%d bytes of records for %d bytes of grammar printed: want at most a few short lines", printed, len(big))
			}
			if sources["llama.cpp"] == 0 {
				t.Fatalf("no llama.cpp record (the n_ctx_per_seq warning at start): %v", sources)
			}
			if sources["msg:stopped"] != 1 {
				t.Fatalf("the shutdown's last line is missing: %v", sources)
			}
			if verbose && sources["llama.cpp"] < 10 {
				t.Fatalf("--verbose: %d llama.cpp records, want its loader's messages", sources["llama.cpp"])
			}
		})
	}
}

func firstWord(v any) string {
	s, _ := v.(string)
	w, _, _ := strings.Cut(s, " ")
	return w
}

// lineSink is an io.Writer that sends each complete line written to it on
// lines, so a test can wait for a process's log line without polling.
type lineSink struct {
	buf   []byte
	lines chan string
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines <- string(s.buf[:i])
		s.buf = s.buf[i+1:]
	}
}

// waitLog reads records from lines until one's msg is msg (returned) or
// another's is fail (fatal), or the deadline passes.
func waitLog(t *testing.T, lines <-chan string, msg, fail string) map[string]any {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case line := <-lines:
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("line %q is not one JSON object: %v", line, err)
			}
			switch rec["msg"] {
			case msg:
				return rec
			case fail:
				t.Fatalf("waiting for %q: %s", msg, line)
			}
		case <-deadline:
			t.Fatalf("no %q logged", msg)
		}
	}
}

// A SIGHUP whose configuration cannot be loaded — a model file that is not
// there, a context whose KV cache cannot be allocated, a models: entry that
// is missing — logs why (as JSON) and keeps serving the running
// configuration; it never claims "configuration reloaded". A good one
// then reloads.
func TestSIGHUPThatCannotLoadKeepsTheRunningConfiguration(t *testing.T) {
	model, err := ensureTinyModel(apptest.ModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kvwin.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte("slots: 1\nthreads: 1\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("model: " + model + "\nctx: 1024\n")
	sink := &lineSink{lines: make(chan string, 10_000)}
	cmd, url := serverProcessTo(t, nil, sink, "--config", cfgPath, "--data-dir", dir, "--log-format", "json")
	nctx := func() int {
		t.Helper()
		var slots []struct {
			NCtx int `json:"n_ctx"`
		}
		resp, err := http.Get(url + "/slots")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil || len(slots) != 1 {
			t.Fatalf("/slots: %v %v", slots, err)
		}
		return slots[0].NCtx
	}
	const kept, reloaded = "SIGHUP: configuration not reloaded; the running one stays", "configuration reloaded"
	for _, tc := range []struct{ name, body, want string }{
		{"impossible ctx", "model: " + model + "\nctx: 100000000\n", "does not fit"},
		{"missing model", "model: " + filepath.Join(dir, "gone.gguf") + "\n", "gone.gguf"},
		{"missing model of models", "models:\n  - name: a\n    model: " + model + "\n  - name: b\n    model: " + filepath.Join(dir, "b.gguf") + "\n", "models[1] (b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.body)
			syscall.Kill(cmd.Process.Pid, syscall.SIGHUP)
			rec := waitLog(t, sink.lines, kept, reloaded)
			if e, _ := rec["err"].(string); !strings.Contains(e, tc.want) || rec["level"] != "ERROR" {
				t.Fatalf("logged %v, want an error naming %q", rec, tc.want)
			}
			if tr := apptest.PostWith(t, url, nil, map[string]any{"messages": apptest.Msgs("user", "Hello."), "max_tokens": 2}); tr.Status != 200 {
				t.Fatalf("after the refused reload: %d %s", tr.Status, tr.Body)
			}
			if n := nctx(); n != 1024 {
				t.Fatalf("after the refused reload the slots have %d tokens, want the running 1024", n)
			}
		})
	}
	write("model: " + model + "\nctx: 2048\n")
	syscall.Kill(cmd.Process.Pid, syscall.SIGHUP)
	waitLog(t, sink.lines, reloaded, kept)
	if n := nctx(); n != 2048 {
		t.Fatalf("after a good reload the slots have %d tokens, want 2048", n)
	}
}

// A kvwin serve that cannot start under --log-format json says why in one
// JSON record and exits 1: a configuration file that does not parse, a
// model that is not there, a context that cannot be allocated.
func TestJSONLogsOfAServerThatCannotStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bogus_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad config file", []string{"--config", bad}, `unknown key "bogus_key"`},
		{"missing model", []string{"--model", filepath.Join(t.TempDir(), "gone.gguf")}, "gone.gguf"},
		{"impossible ctx", []string{"--ctx", "100000000"}, "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--threads", "1", "--log-format", "json"}, tc.args...)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KVWIN_TEST_MAIN=1", "KVWIN_TEST_ARGS="+strings.Join(args, "\x1f"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1", err)
			}
			var last map[string]any
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()+stdout.String()), "\n") {
				if err := json.Unmarshal([]byte(line), &last); err != nil {
					t.Fatalf("line %q is not one JSON object: %v", line, err)
				}
			}
			if e, _ := last["err"].(string); last["level"] != "ERROR" || !strings.Contains(e, tc.want) {
				t.Fatalf("last record %v, want an error naming %q", last, tc.want)
			}
		})
	}
}
