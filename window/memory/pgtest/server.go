package pgtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a PostgreSQL server of one test's own, which it may pause and
// resume (a database that hangs with its connections open) without
// disturbing the server other tests share.
type Server struct {
	// DSN is the URL of its database "postgres".
	DSN string

	t   testing.TB
	cmd *exec.Cmd
	mu  sync.Mutex
	log bytes.Buffer // the server's log (stderr), for failures
}

// startGuard bounds how long initdb and the server's start may take before
// the test fails: a hang guard, not a timing.
const startGuard = 2 * time.Minute

// Start initdbs a cluster in a fresh directory and starts its server on a
// free loopback port (as the postgres user when the test runs as root,
// which PostgreSQL refuses to run as). It skips t when no PostgreSQL
// binaries are installed, unless CI is set: then it fails. The server is
// stopped (resumed first if paused) and its directory removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binDir()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no PostgreSQL binaries (initdb, postgres) with CI set: .ci/postgres installs them")
		}
		t.Skip("no PostgreSQL binaries (initdb, postgres): apt-get install postgresql")
	}
	cred, err := owner()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvwin-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir, "-c", "fsync=off", "-c", "max_connections=50")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() { // ends when the server exits and its stderr closes
		defer close(exited)
		said := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if !said && strings.Contains(sc.Text(), "database system is ready to accept connections") {
				said = true
				close(ready)
			}
		}
	}()
	t.Cleanup(func() { s.stop(exited) })
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("postgres exited before it was ready:\n%s", s.Log())
	case <-time.After(startGuard):
		t.Fatalf("postgres not ready after %v:\n%s", startGuard, s.Log())
	}
	return s
}

// Pause stops the server's every process (SIGSTOP): connections stay open,
// new ones are accepted by the kernel, and nothing answers until Resume.
// The postmaster stops first, so it forks no process the rest miss; its
// children each start a session of their own, so they are found by parent
// (/proc), not by process group.
func (s *Server) Pause() {
	s.signal(s.cmd.Process.Pid, syscall.SIGSTOP)
	for _, pid := range children(s.cmd.Process.Pid) {
		s.signal(pid, syscall.SIGSTOP)
	}
}

// Resume lets a paused server run again (SIGCONT to the postmaster and its
// children).
func (s *Server) Resume() {
	for _, pid := range children(s.cmd.Process.Pid) {
		s.signal(pid, syscall.SIGCONT)
	}
	s.signal(s.cmd.Process.Pid, syscall.SIGCONT)
}

// Log returns what the server has logged so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// signal sends sig to pid; a child that has exited meanwhile is no error.
func (s *Server) signal(pid int, sig syscall.Signal) {
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.t.Fatalf("signal %v to postgres %d: %v", sig, pid, err)
	}
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// stop resumes the server and shuts it down fast (SIGINT to the
// postmaster, which ends its backends).
func (s *Server) stop(exited <-chan struct{}) {
	for _, pid := range children(s.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(startGuard):
		_ = s.cmd.Process.Kill()
		s.t.Errorf("postgres did not stop after %v", startGuard)
		<-exited
	}
	_ = s.cmd.Wait()
}

// binDir is the newest installed PostgreSQL's bin directory (Debian's
// /usr/lib/postgresql/N/bin), else the one holding initdb on PATH; "" if
// none.
func binDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(p)
		}
	}
	return ""
}

// version is N of /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// owner is the credential the server runs as: the postgres user when the
// test runs as root, nil (the test's own) otherwise.
func owner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort is a loopback port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
