package app

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// What a captured stream carries becomes records: one a line, cut to a
// prefix, at most stdioLinesPerRead from one read (the rest counted), a
// line split across reads joined, a last line without a newline kept.
func TestCapturedLinesBecomeShortRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reads  []string
		want   []string // msgs, in order
		counts []int    // "lines" of the summary records, in order
	}{
		{"one line", []string{"hello\n"}, []string{"hello"}, nil},
		{"split across reads", []string{"hel", "lo\nwor", "ld\n"}, []string{"hello", "world"}, nil},
		{"no final newline", []string{"last words"}, []string{"last words"}, nil},
		{"blank lines dropped", []string{"\n\r\n  \na\n"}, []string{"a"}, nil},
		{"a burst", []string{"1\n2\n3\n4\n5\n6\n7\n"}, []string{"1", "2", "3", "4", "process output: more lines not shown"}, []int{3}},
		{"forged JSON stays a message", []string{`{"level":"ERROR","forged":true}` + "\n"}, []string{`{"level":"ERROR","forged":true}`}, nil},
		{"long line cut", []string{strings.Repeat("x", 100_000) + "\n"}, []string{strings.Repeat("x", StdioPrefixBytes)}, nil},
		{"cut inside a rune", []string{strings.Repeat("x", StdioPrefixBytes-1) + "é\n"}, []string{strings.Repeat("x", StdioPrefixBytes-1)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&out, nil))
			l := lineLog{log: log, stream: "stderr"}
			for _, r := range tc.reads {
				l.chunk([]byte(r))
			}
			l.end()
			var msgs []string
			var counts []int
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if line == "" {
					continue
				}
				var rec struct {
					Msg    string
					Source string
					Lines  int
					Bytes  int
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				if rec.Source != "stderr" {
					t.Fatalf("record without its source: %s", line)
				}
				msgs = append(msgs, rec.Msg)
				if rec.Lines > 0 {
					counts = append(counts, rec.Lines)
				}
				if len(rec.Msg) > StdioPrefixBytes+1 {
					t.Fatalf("a %d-byte message", len(rec.Msg))
				}
			}
			if strings.Join(msgs, "|") != strings.Join(tc.want, "|") || len(counts) != len(tc.counts) {
				t.Fatalf("records %q (counts %v), want %q (counts %v)", msgs, counts, tc.want, tc.counts)
			}
			for i := range counts {
				if counts[i] != tc.counts[i] {
					t.Fatalf("counts %v, want %v", counts, tc.counts)
				}
			}
		})
	}
}

// What is written straight to file descriptors 1 and 2 (as llama.cpp's
// fprintf and printf do, past every Go writer) comes back as records of
// the logger, each with its stream, and nothing of it reaches the
// original descriptors.
func TestCaptureStdioLogsRawWrites(t *testing.T) {
	s, err := CaptureStdio()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s.Start(slog.New(slog.NewJSONHandler(&out, nil)))
	syscall.Write(2, []byte("ggml: printed past the callback\n"))
	syscall.Write(1, []byte("printf to stdout\n"))
	s.Close()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec struct{ Msg, Source string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got[rec.Source] = rec.Msg
	}
	if got["stderr"] != "ggml: printed past the callback" || got["stdout"] != "printf to stdout" {
		t.Fatalf("records %v from %q", got, out.String())
	}
}

// A write to the captured fd 2 that the pipe cannot hold is refused at
// once (EAGAIN) rather than waiting for a reader: the Go runtime writes
// its crash dump there with the world stopped, when no goroutine reads the
// pipe, and must go on to the crash output and exit (the process test is
// TestCrashEndsTheProcessWithItsDumpOnStderr in cmd/kvwin).
func TestCapturedStderrNeverBlocksAWriter(t *testing.T) {
	s, err := CaptureStdio()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	chunk := make([]byte, 4096)
	var werr error
	for written := 0; written < 64<<20 && werr == nil; written += len(chunk) {
		_, werr = syscall.Write(2, chunk) // not started: nothing reads
	}
	if werr != syscall.EAGAIN {
		t.Fatalf("a write to a full captured stderr: %v, want EAGAIN", werr)
	}
}

// The pipes are read by blocking system calls, not through the network
// poller: a Go crash's dump wakes the stderr reader, and a goroutine
// leaving a system call waits for the crash, where one the poller wakes
// may run while the dump walks its stack (see pump). The write end of fd 2
// stays non-blocking (TestCapturedStderrNeverBlocksAWriter).
func TestCapturedPipesAreReadInASystemCall(t *testing.T) {
	s, err := CaptureStdio()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nonblock := func(fd uintptr) bool {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if errno != 0 {
			t.Fatalf("fcntl %d: %v", fd, errno)
		}
		return flags&syscall.O_NONBLOCK != 0
	}
	for i, p := range s.pipes {
		if rc, err := p.SyscallConn(); err != nil {
			t.Fatal(err)
		} else if err := rc.Control(func(fd uintptr) {
			if nonblock(fd) {
				t.Errorf("the reader of fd %d is non-blocking: the network poller reads it", i+1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !nonblock(2) {
		t.Error("fd 2 blocks its writers")
	}
}
