package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"", false},
		{"0f1e2d3c4b5a69788796a5b4", true},
		{"123e4567-e89b-12d3-a456-426614174000", true},
		{"trace:span.1_a", true},
		{strings.Repeat("a", RequestIDMaxLength), true},
		{strings.Repeat("a", RequestIDMaxLength+1), false},
		{"two words", false},
		{"line\nbreak", false},
		{`quote"`, false},
		{"é", false},
		{"a=b", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			if got := ValidRequestID(tc.id); got != tc.want {
				t.Fatalf("ValidRequestID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

func TestNewIsValidAndFresh(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewRequestID()
		if !ValidRequestID(id) || len(id) != 24 {
			t.Fatalf("NewRequestID() = %q: want 24 valid characters", id)
		}
		if seen[id] {
			t.Fatalf("NewRequestID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestContextAndHeader(t *testing.T) {
	h := http.Header{}
	SetRequestID(context.Background(), h)
	if _, ok := h[HeaderRequestID]; ok {
		t.Fatalf("a context without an id set %s: %v", HeaderRequestID, h)
	}
	ctx := WithRequestID(context.Background(), "abc")
	if got := RequestIDFrom(ctx); got != "abc" {
		t.Fatalf("From = %q, want abc", got)
	}
	SetRequestID(ctx, h)
	if got := h.Get("X-Request-ID"); got != "abc" {
		t.Fatalf("header = %q, want abc", got)
	}
}

// TestHandlerAddsID logs through a JSON handler and reads the lines back.
func TestHandlerAddsID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	log.InfoContext(WithRequestID(context.Background(), "id-1"), "with id", "n", 1)
	log.Info("without id")
	log.Debug("below the level", "x", 1) // the wrapped handler's level holds

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first[RequestIDKey] != "id-1" || first["component"] != "test" || first["n"] != 1.0 {
		t.Fatalf("first line = %v: want request_id id-1, component test, n 1", first)
	}
	if _, ok := second[RequestIDKey]; ok {
		t.Fatalf("a line logged without an id has one: %v", second)
	}
}
