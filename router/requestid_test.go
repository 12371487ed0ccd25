package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/engine/wire"
)

// The line saying a backend is down names the turn that found it so: it
// carries that turn's request id.
func TestBackendDownLineCarriesTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(wire.NewLogHandler(slog.NewJSONHandler(&buf, nil)))
	a, b := newFake("a"), newFake("b")
	a.fail = fmt.Errorf("%w: connection refused", engine.ErrUnavailable)
	r, err := New(Config{Policy: PolicyRoundRobin}, []engine.Backend{a, b}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := wire.WithRequestID(context.Background(), "turn-42")
	res, err := r.Generate(ctx, engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
	if err != nil || res.Backend != "b" {
		t.Fatalf("served by %q, err %v", res.Backend, err)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "backend down; routing around it" {
			found = true
			if m[wire.RequestIDKey] != "turn-42" || m["backend"] != "a" {
				t.Fatalf("down line %v: want request_id turn-42, backend a", m)
			}
		}
	}
	if !found {
		t.Fatalf("no line says a is down:\n%s", buf.String())
	}
}
