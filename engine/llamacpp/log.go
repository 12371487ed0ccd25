package llamacpp

/*
typedef void (*kvwin_log_callback)(int level, char *text, void *user_data);
void llama_log_set(kvwin_log_callback log_callback, void *user_data);
extern void kvwinLlamaLog(int level, char *text, void *user_data);
*/
import "C"

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// llama.cpp (and ggml, which llama_log_set also sets) reports through one
// process-wide callback. The pinned binding installs one that prints every
// message to standard error as it is, so its messages were neither in
// kvwin's log format nor bounded in size. This file replaces it: each
// message becomes one record of kvwin's logger, at its own level mapped to
// slog's, dropped below the level SetLogger was given, and cut to a short
// prefix, so that request text (a prompt, a grammar) is never logged whole.

// LogPrefixBytes is the most bytes of one llama.cpp message line that
// reach the log; the rest is counted in the record's "bytes".
const LogPrefixBytes = 200

// logLinesPerMessage is the most lines of one message that are logged; the
// rest are counted.
const logLinesPerMessage = 4

// ggml_log_level values (ggml.h).
const (
	ggmlLogDebug = 1
	ggmlLogInfo  = 2
	ggmlLogWarn  = 3
	ggmlLogError = 4
	ggmlLogCont  = 5 // continues the previous message
)

// llamaLog is where the callback sends messages. Its zero value logs to
// slog.Default() at warnings and above.
var llamaLog = &logSink{min: slog.LevelWarn}

func init() {
	C.llama_log_set(C.kvwin_log_callback(C.kvwinLlamaLog), nil)
}

// SetLogger sends llama.cpp's and ggml's messages at min and above to log
// (nil: slog.Default()), one record a line. It is process-wide (llama.cpp
// has one callback) and safe to call at any time.
func SetLogger(log *slog.Logger, min slog.Level) {
	llamaLog.mu.Lock()
	defer llamaLog.mu.Unlock()
	llamaLog.log, llamaLog.min = log, min
}

// logSink turns callback fragments into records. llama.cpp sends a line in
// pieces (GGML_LOG_LEVEL_CONT continues the last one, e.g. the loader's
// progress dots), so text is held until its newline.
type logSink struct {
	mu      sync.Mutex
	log     *slog.Logger
	min     slog.Level
	level   slog.Level      // of the message being continued
	pending strings.Builder // its text so far, at most LogPrefixBytes
	over    int             // bytes of it not held
}

//export kvwinLlamaLog
func kvwinLlamaLog(level C.int, text *C.char, _ unsafe.Pointer) {
	llamaLog.add(int(level), C.GoString(text))
}

// add takes one callback message.
func (s *logSink) add(level int, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if level != ggmlLogCont {
		if s.pending.Len() > 0 || s.over > 0 {
			s.flush() // a new message ends one that had no newline
		}
		s.level = slogLevel(level)
	}
	lines := 0
	for text != "" {
		line, rest, nl := strings.Cut(text, "\n")
		text = rest
		held := min(max(0, LogPrefixBytes-s.pending.Len()), len(line))
		s.pending.WriteString(line[:held])
		s.over += len(line) - held
		if !nl {
			break
		}
		if lines++; lines <= logLinesPerMessage {
			s.flush()
		} else {
			s.pending.Reset()
			s.over = 0
		}
	}
	if lines > logLinesPerMessage && s.level >= s.min {
		s.logger().Log(context.Background(), s.level, "llama.cpp: more lines of this message not shown", "lines", lines-logLinesPerMessage)
	}
}

// flush logs the pending line, if its level is logged.
func (s *logSink) flush() {
	msg := strings.TrimRight(s.pending.String(), " \r\t")
	n := s.pending.Len() + s.over
	s.pending.Reset()
	s.over = 0
	if s.level < s.min || strings.TrimSpace(msg) == "" {
		return
	}
	args := []any{"source", "llama.cpp"}
	if n > LogPrefixBytes {
		args = append(args, "bytes", n, "truncated", true)
	}
	s.logger().Log(context.Background(), s.level, ValidPrefix(msg), args...)
}

func (s *logSink) logger() *slog.Logger {
	if s.log != nil {
		return s.log
	}
	return slog.Default()
}

// slogLevel maps a ggml_log_level to slog's.
func slogLevel(level int) slog.Level {
	switch level {
	case ggmlLogDebug:
		return slog.LevelDebug
	case ggmlLogWarn:
		return slog.LevelWarn
	case ggmlLogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ValidPrefix drops a rune cut in half at the end of s and replaces any
// invalid bytes, so a line of llama.cpp's output cut to a prefix of some
// bytes (by the log callback here, or from a captured standard stream) is
// valid UTF-8 in a log record.
func ValidPrefix(s string) string {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
