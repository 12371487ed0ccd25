package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"kvwin/engine/wire"
)

// --log-format: text is key=value, json one object a line; both carry the
// request id of the context a line is logged with; anything else is an
// error naming the flag.
func TestLogFormats(t *testing.T) {
	ctx := wire.WithRequestID(context.Background(), "r-1")
	var text bytes.Buffer
	log, err := NewLoggerTo(&text, LogText, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.InfoContext(ctx, "hello", "n", 2)
	if got := text.String(); !strings.Contains(got, "msg=hello n=2 request_id=r-1") {
		t.Fatalf("text line %q", got)
	}

	var js bytes.Buffer
	if log, err = NewLoggerTo(&js, LogJSON, slog.LevelInfo); err != nil {
		t.Fatal(err)
	}
	log.InfoContext(ctx, "hello", "n", 2)
	log.Debug("below the level")
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatalf("json line %q: %v", js.String(), err)
	}
	if m["msg"] != "hello" || m["n"] != 2.0 || m["request_id"] != "r-1" || m["level"] != "INFO" {
		t.Fatalf("json line %v", m)
	}

	if _, err := NewLoggerTo(&js, "logfmt", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("unknown format: err %v", err)
	}
}
