package llamaserver_test

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/engine/llamacpp"
	"kvwin/engine/llamaserver"
	"kvwin/gguf"
	"kvwin/web"
)

// TestConformance runs the engine.Backend conformance suite on the adapter
// talking to a real kvwin node: kvwin's own node routes (web) over the
// embedded engine with the test model, on a loopback httptest server.
func TestConformance(t *testing.T) {
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.WriteTiny(model, gguf.DefaultTinyConfig()); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node := func(t *testing.T) string {
		e, err := llamacpp.New(llamacpp.Config{ModelPath: model, Threads: 1, Slots: 2, Ctx: 512}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		s, err := web.New(web.Config{}, e, quiet)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(func() { ts.Close(); e.Close() })
		return ts.URL
	}
	backend := func(t *testing.T, url string) engine.Backend {
		b, err := llamaserver.New(llamaserver.Config{BaseURL: url}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	enginetest.Run(t, func(t *testing.T) engine.Backend { return backend(t, node(t)) }, enginetest.Options{
		Caches: true,
		Unreachable: func(t *testing.T) engine.Backend {
			gone := httptest.NewServer(nil)
			gone.Close()
			return backend(t, gone.URL)
		},
	})
}
