package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvwin/cmd/kvwin/bench/node"
	"kvwin/window/memory"
)

// The test binary runs kvwin itself when KVWIN_TEST_MAIN is set, so a test
// can kill -9 a real server process.
func init() {
	if os.Getenv("KVWIN_TEST_MAIN") != "1" {
		return
	}
	os.Args = append([]string{"kvwin"}, strings.Split(os.Getenv("KVWIN_TEST_ARGS"), "\x1f")...)
	main()
	os.Exit(0)
}

// serverProcess starts kvwin serve as a child process on a free port.
func serverProcess(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	return serverProcessTo(t, nil, nil, args...)
}

// serverProcessTo starts kvwin serve as serverProcess does, its standard
// output and error going to stdout and stderr (nil: discarded).
func serverProcessTo(t *testing.T, stdout, stderr io.Writer, args ...string) (*exec.Cmd, string) {
	t.Helper()
	return serverProcessEnv(t, nil, stdout, stderr, args...)
}

// serverProcessEnv starts kvwin serve as serverProcessTo does, with env
// ("KEY=value") added to the test's environment.
func serverProcessEnv(t *testing.T, env []string, stdout, stderr io.Writer, args ...string) (*exec.Cmd, string) {
	t.Helper()
	port, err := node.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	args = append([]string{"serve", "--addr", "127.0.0.1:" + strconv.Itoa(port)}, args...)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), "KVWIN_TEST_MAIN=1", "KVWIN_TEST_ARGS="+strings.Join(args, "\x1f"))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return cmd, url
		}
		if time.Now().After(deadline) {
			t.Fatal("server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A named conversation survives kill -9: every turn the server had evicted
// when it acknowledged a request is in the store after a restart, and the
// packet still finds it.
func TestMemorySurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	model, err := ensureTinyModel(apptest.ModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", dir, "--model", model, "--slots", "1", "--ctx", "4096", "--threads", "1",
		"--window", "memory", "--window-budget", "1024"}
	cmd, url := serverProcess(t, args...)
	history := apptest.Msgs("system", "You keep the team's notes.", "user", "Hello.", "assistant", "Hi.")
	send := func(url string, i int) (apptest.Turn, error) {
		history = append(history, map[string]string{"role": "user", "content": fmt.Sprintf("Note %d: the locker of Member%d is number %d. %s", i, i, 100+i, apptest.Words(i, 80))})
		tr := apptest.PostWith(t, url, map[string]string{"X-Conversation-Id": "notes"}, map[string]any{"messages": history, "max_tokens": 2})
		history = append(history, map[string]string{"role": "assistant", "content": "Noted."})
		return tr, nil
	}
	acked := 0
	for i := range 20 {
		tr, _ := send(url, i)
		if tr.Status != 200 {
			t.Fatalf("turn %d: %d %s", i, tr.Status, tr.Body)
		}
		acked = max(acked, apptest.Atoi(apptest.WindowHeader(t, tr.Header)["evicted_turns"]))
	}
	if acked == 0 {
		t.Fatal("nothing was evicted before the kill")
	}
	// kill -9 while a request is in flight.
	inflight := make(chan struct{})
	go func() {
		defer close(inflight)
		b, _ := json.Marshal(map[string]any{"messages": history, "max_tokens": 500, "ignore_eos": true})
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("X-Conversation-Id", "notes")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil { // the kill usually cuts it: no answer is fine
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitProcessing(t, url) // the request is being generated: kill now
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	<-inflight

	cmd, url = serverProcess(t, args...)
	ask := append(append([]map[string]string{}, history...), map[string]string{"role": "user", "content": "What is the locker number of Member1?"})
	tr := apptest.PostWith(t, url, map[string]string{"X-Conversation-Id": "notes"}, map[string]any{"messages": ask, "max_tokens": 2})
	if tr.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, tr.Header)["packet_turns"]) == 0 {
		t.Fatalf("after restart: status %d, window %q: the packet must find Member1's note", tr.Status, tr.Header.Get("X-Kvwin-Window"))
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // the store is the server's while it runs
	cmd.Wait()
	st, err := memory.Open(memory.StoreConfig{Dir: filepath.Join(dir, "memory")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	turns, err := st.Turns(context.Background(), memory.Key{Tenant: "default", Conversation: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for _, tu := range turns {
		have[tu.Pos] = true
	}
	sinks := 3 // system and the first exchange
	for pos := sinks; pos < sinks+acked; pos++ {
		if !have[pos] {
			t.Fatalf("acknowledged evicted turn %d (of %d) missing from the store after kill -9", pos, acked)
		}
	}
}

// waitProcessing waits until a slot of the server at url is processing.
func waitProcessing(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		var slots []struct {
			Processing bool `json:"is_processing"`
		}
		if resp, err := http.Get(url + "/slots"); err == nil {
			json.NewDecoder(resp.Body).Decode(&slots)
			resp.Body.Close()
		}
		for _, s := range slots {
			if s.Processing {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no slot started processing")
}
