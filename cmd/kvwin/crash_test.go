package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
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

// crashConns is how many idle keep-alive connections the crashed server
// holds: each is a goroutine in the dump, so the dump is several times a
// pipe's buffer (64 KiB), the size at which the runtime's write to a
// captured fd 2 used to block forever with the world stopped.
const crashConns = 300

// A Go crash ends kvwin serve, with a non-zero status and the runtime's
// whole dump on the process's real standard error, although kvwin has
// replaced fds 1 and 2 with pipes that no goroutine reads once the world is
// stopped. SIGQUIT is the stopped-world throw a test can cause: the runtime
// prints every goroutine (here over 300, a dump several pipe buffers long)
// and exits. Before fd 2 was made non-blocking the process hung in that
// write (anon_pipe_write): /health timed out and SIGTERM did nothing. The
// guard below is a hang guard of minutes, not a timing.
func TestCrashEndsTheProcessWithItsDumpOnStderr(t *testing.T) {
	model, err := ensureTinyModel(apptest.ModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd, url := serverProcessTo(t, nil, stderr, "--data-dir", t.TempDir(), "--model", model,
		"--slots", "1", "--ctx", "1024", "--threads", "1")
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	// Runs before serverProcessTo's cleanup, so only this goroutine waits.
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited })

	addr := strings.TrimPrefix(url, "http://")
	for i := range crashConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		// One answered request makes it an idle keep-alive connection,
		// its goroutine parked in the server.
		if _, err := c.Write([]byte("GET /health HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("connection %d: %d, closed %v", i, resp.StatusCode, resp.Close)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("kvwin serve still running 3 minutes after SIGQUIT: blocked writing its dump")
	}
	var exit *exec.ExitError
	if !errors.As(waitErr, &exit) || exit.Success() {
		t.Fatalf("exit after SIGQUIT: %v, want a non-zero status", waitErr)
	}
	dump, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(dump, []byte("SIGQUIT: quit")) {
		t.Fatalf("no SIGQUIT dump on stderr (%d bytes): %.2000s", len(dump), dump)
	}
	// Every goroutine is in it: the dump reached its end, past what the
	// capture pipe holds.
	if n := bytes.Count(dump, []byte("\ngoroutine ")); n < crashConns {
		t.Fatalf("%d goroutines in a %d-byte dump, want the whole dump (over %d)", n, len(dump), crashConns)
	}
	if len(dump) < 4<<16 {
		t.Fatalf("a %d-byte dump: too short to outgrow the capture pipe, so it proves nothing", len(dump))
	}
}
