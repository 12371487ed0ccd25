package llamaserver_test

import (
	"net/http/httptest"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/engine/llamaserver"
	"kvwin/web"
)

// TestConformance runs the engine.Backend conformance suite on the adapter
// talking to kvwin's own node routes (web, on a loopback httptest server)
// over enginetest's fake with every ability. The package stays pure Go,
// so it runs under the race detector; cmd/kvwin/app runs the suite on the
// adapter against a node with the embedded engine.
func TestConformance(t *testing.T) {
	node := func(t *testing.T) string {
		f := enginetest.New(engine.Info{Name: "node", Model: "tiny", ContextSlot: 1024, Slots: 2})
		s, err := web.New(web.Config{}, enginetest.NewFull(f), nil)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(ts.Close)
		t.Cleanup(f.Release)
		return ts.URL
	}
	backend := func(t *testing.T, url string) engine.Backend {
		b, err := llamaserver.New(llamaserver.Config{BaseURL: url}, nil)
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
