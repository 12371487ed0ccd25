// Package node starts `kvwin serve` as a subprocess for the benches that
// measure a server from outside (bench route's nodes, bench load's
// target): each in its own process group, dying with the bench.
package node

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Process is a kvwin server running as a subprocess.
type Process struct {
	cmd *exec.Cmd
	// URL is its base URL, http://127.0.0.1:port.
	URL string
	// Cleanup runs after it stopped; nil for none.
	Cleanup func()
}

// Start starts `kvwin serve` (exe, the kvwin binary) with args on a free
// loopback port, in its own process group, dying with this process
// (Pdeathsig), and waits until it answers /health.
func Start(ctx context.Context, exe string, args []string) (*Process, error) {
	port, err := FreePort()
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
	n := &Process{cmd: cmd, URL: "http://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(n.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.Stop()
			return nil, errors.New("node did not become healthy within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after 5s; then
// Cleanup.
func (n *Process) Stop() {
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
	if n.Cleanup != nil {
		n.Cleanup()
	}
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
