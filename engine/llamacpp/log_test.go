package llamacpp

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// llama.cpp's callback messages become records: levels mapped, pieces of
// a line (GGML_LOG_LEVEL_CONT) joined, below the minimum dropped (a
// continuation with its line), each line cut to LogPrefixBytes.
func TestLlamaMessagesBecomeRecords(t *testing.T) {
	type msg struct {
		level int
		text  string
	}
	for _, tc := range []struct {
		name string
		in   []msg
		min  slog.Level
		want []string // LEVEL msg
	}{
		{"levels", []msg{{ggmlLogError, "bad\n"}, {ggmlLogWarn, "careful\n"}, {ggmlLogInfo, "fyi\n"}, {ggmlLogDebug, "detail\n"}}, slog.LevelDebug,
			[]string{"ERROR bad", "WARN careful", "INFO fyi", "DEBUG detail"}},
		{"below warn dropped", []msg{{ggmlLogInfo, "loading"}, {ggmlLogCont, "...."}, {ggmlLogCont, "done\n"}, {ggmlLogWarn, "w\n"}}, slog.LevelWarn,
			[]string{"WARN w"}},
		{"continued line joined", []msg{{ggmlLogInfo, "loading"}, {ggmlLogCont, "..."}, {ggmlLogCont, " done\n"}}, slog.LevelInfo,
			[]string{"INFO loading... done"}},
		{"a line without newline ends at the next message", []msg{{ggmlLogWarn, "first"}, {ggmlLogError, "second\n"}}, slog.LevelInfo,
			[]string{"WARN first", "ERROR second"}},
		{"long line cut", []msg{{ggmlLogError, strings.Repeat("g", 50_000) + "\n"}}, slog.LevelInfo,
			[]string{"ERROR " + strings.Repeat("g", LogPrefixBytes)}},
		{"many lines counted", []msg{{ggmlLogError, "1\n2\n3\n4\n5\n6\n"}}, slog.LevelInfo,
			[]string{"ERROR 1", "ERROR 2", "ERROR 3", "ERROR 4", "ERROR llama.cpp: more lines of this message not shown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &logSink{log: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), min: tc.min}
			for _, m := range tc.in {
				s.add(m.level, m.text)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if line == "" {
					continue
				}
				var rec struct{ Level, Msg string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				got = append(got, rec.Level+" "+rec.Msg)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("records %q, want %q", got, tc.want)
			}
		})
	}
}
