package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"kvwin/engine/llamacpp"
)

// Stdio is the process's standard output and error taken over, so that
// every line kvwin serve prints is one record of its logger (one JSON
// object under --log-format json): llama.cpp and ggml also print with
// fprintf(stderr, …) and printf, past any callback (a grammar that does not
// parse is printed whole), and Go code writes to os.Stderr. File
// descriptors 1 and 2 become pipes read by Stdio's goroutines; each line
// read is logged, cut to a short prefix. The logger writes to Real, a
// duplicate of the original standard error, so its own output never comes
// back through a pipe.
//
// A Go crash (a fatal error such as running out of memory, an unrecovered
// panic, SIGQUIT's goroutine dump) must end the process whatever the pipes
// hold. The runtime writes its dump to fd 2 and only then to the crash
// output; it writes with the world stopped, so no goroutine reads the pipe,
// and a dump longer than the pipe's buffer would block that write forever:
// a process that answers nothing and ignores SIGTERM. So the write end on
// fd 2 is non-blocking (a full pipe drops the write instead of waiting),
// and the whole dump goes to Real through debug.SetCrashOutput. The price:
// a burst of more than a pipe's buffer (64 KiB) printed to fd 2 faster than
// the pump reads it loses its excess, of which at most a few lines would be
// logged anyway (stdioLinesPerRead).
type Stdio struct {
	orig  *os.File // the original standard error, where the logger writes
	saved [2]int   // duplicates of the original fds 1 and 2, restored by Close
	pipes [2]*os.File
	wg    sync.WaitGroup
	once  sync.Once
}

// StdioPrefixBytes is the most bytes of one captured line that are logged;
// the record counts the rest.
const StdioPrefixBytes = 200

// stdioLinesPerRead is the most lines logged from one read of a pipe (one
// burst of output, such as a multi-line grammar printed at once); the rest
// are counted in one record.
const stdioLinesPerRead = 4

// CaptureStdio takes over file descriptors 1 and 2. Until Start, what is
// printed waits in the pipes, up to a pipe's buffer; past it a write to fd
// 1 waits, one to fd 2 is dropped.
func CaptureStdio() (*Stdio, error) {
	s := &Stdio{saved: [2]int{-1, -1}}
	for i, fd := range []int{1, 2} {
		saved, err := syscall.Dup(fd)
		if err != nil {
			s.undo()
			return nil, fmt.Errorf("capture fd %d: %w", fd, err)
		}
		syscall.CloseOnExec(saved)
		s.saved[i] = saved
		// Both ends blocking: the reader's goroutine waits in a read
		// system call, not in the network poller (pump).
		var p [2]int
		if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
			s.undo()
			return nil, fmt.Errorf("capture fd %d: %w", fd, err)
		}
		r := os.NewFile(uintptr(p[0]), fmt.Sprintf("fd %d pipe", fd)) // blocking: never polled
		err = syscall.Dup3(p[1], fd, 0)
		syscall.Close(p[1]) // fd now holds the write end
		if err == nil && fd == 2 {
			err = syscall.SetNonblock(fd, true) // a stopped world's dump must not wait on the pipe
		}
		if err != nil {
			r.Close()
			s.undo()
			return nil, fmt.Errorf("capture fd %d: %w", fd, err)
		}
		s.pipes[i] = r
	}
	orig, err := syscall.Dup(s.saved[1])
	if err != nil {
		s.undo()
		return nil, fmt.Errorf("capture: %w", err)
	}
	syscall.CloseOnExec(orig)
	s.orig = os.NewFile(uintptr(orig), "/dev/stderr")
	debug.SetCrashOutput(s.orig, debug.CrashOptions{})
	return s, nil
}

// Real is the original standard error: where the logger must write.
func (s *Stdio) Real() *os.File { return s.orig }

// Start logs every line printed from now on (and any waiting) through log,
// until Close.
func (s *Stdio) Start(log *slog.Logger) {
	for i, name := range []string{"stdout", "stderr"} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			pump(s.pipes[i], name, log)
		}()
	}
}

// Close puts back the original standard output and error, then waits
// until every line printed before was logged. Safe to call more than once.
func (s *Stdio) Close() {
	s.once.Do(func() {
		s.undo() // the pipes' write ends close: their readers see EOF
		// fd 2 is the original standard error again: a crash from now on
		// writes there once, not also to its duplicate.
		debug.SetCrashOutput(nil, debug.CrashOptions{})
		s.wg.Wait()
		for _, p := range s.pipes {
			if p != nil {
				p.Close()
			}
		}
	})
}

// undo restores fds 1 and 2 from their duplicates.
func (s *Stdio) undo() {
	for i, fd := range []int{1, 2} {
		if s.saved[i] >= 0 {
			syscall.Dup3(s.saved[i], fd, 0)
			syscall.Close(s.saved[i])
			s.saved[i] = -1
		}
	}
}

// pump logs the lines read from r until EOF. r is blocking, so between
// reads its goroutine is in a read system call. A Go crash's dump, written
// to fd 2 with the world frozen, ends that call; a goroutine leaving a
// system call then waits for the crash to end the process (the runtime's
// exitsyscall), where one the network poller woke could run and change
// its stack while the dump walked it: the dump's walk of the stderr pump
// then faulted, and the process died of SIGSEGV with its dump cut short
// (3 of 320 runs of cmd/kvwin's TestCrashEndsTheProcessWithItsDumpOnStderr
// with the poller, none of 320 without).
func pump(r *os.File, stream string, log *slog.Logger) {
	l := lineLog{log: log, stream: stream}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		l.chunk(buf[:n])
		if err != nil {
			l.end()
			return
		}
	}
}

// lineLog turns bytes read from one stream into records.
type lineLog struct {
	log     *slog.Logger
	stream  string
	cur     []byte // the line so far, at most StdioPrefixBytes
	over    int    // its bytes not held
	logged  int    // lines logged from the current read
	skipped int    // lines of the current read not logged
}

// chunk takes the bytes of one read.
func (l *lineLog) chunk(b []byte) {
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		held := min(StdioPrefixBytes-len(l.cur), i)
		l.cur = append(l.cur, b[:held]...)
		l.over += i - held
		if i == len(b) {
			break
		}
		l.line()
		b = b[i+1:]
	}
	if l.skipped > 0 {
		l.log.Warn("process output: more lines not shown", "source", l.stream, "lines", l.skipped)
	}
	l.logged, l.skipped = 0, 0
}

// end logs a last line that had no newline.
func (l *lineLog) end() {
	if len(l.cur) > 0 || l.over > 0 {
		l.line()
	}
	if l.skipped > 0 {
		l.log.Warn("process output: more lines not shown", "source", l.stream, "lines", l.skipped)
	}
}

// line logs the line held, at most stdioLinesPerRead per read.
func (l *lineLog) line() {
	text := strings.TrimRight(string(l.cur), " \r\t")
	n := len(l.cur) + l.over
	l.cur, l.over = l.cur[:0], 0
	if strings.TrimSpace(text) == "" {
		return
	}
	if l.logged >= stdioLinesPerRead {
		l.skipped++
		return
	}
	l.logged++
	level := slog.LevelWarn // nothing kvwin runs should print here; it is worth seeing
	if strings.Contains(strings.ToLower(text), "error") || strings.HasPrefix(text, "panic") || strings.HasPrefix(text, "fatal") {
		level = slog.LevelError
	}
	args := []any{"source", l.stream}
	if n > StdioPrefixBytes {
		args = append(args, "bytes", n, "truncated", true)
	}
	l.log.Log(context.Background(), level, llamacpp.ValidPrefix(text), args...)
}
