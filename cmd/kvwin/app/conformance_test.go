package app_test

import (
	"net/http/httptest"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/engine/llamaserver"
	"kvwin/router"
)

// nodeBackend starts a real kvwin node (embedded engine, 2 slots of 1024
// tokens) and returns the llama-server adapter over it.
func nodeBackend(t *testing.T) engine.Backend {
	node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 1024 })
	return llamaserverBackend(t, node.URL())
}

func llamaserverBackend(t *testing.T, url string) engine.Backend {
	b, err := llamaserver.New(llamaserver.Config{BaseURL: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// gone is the URL of a server that is no longer there.
func gone() string {
	s := httptest.NewServer(nil)
	s.Close()
	return s.URL
}

// TestConformanceOfTheAdapterOverANode runs the engine.Backend conformance
// suite on the llama-server adapter against a real kvwin node.
func TestConformanceOfTheAdapterOverANode(t *testing.T) {
	enginetest.Run(t, nodeBackend, enginetest.Options{
		Caches:      true,
		Unreachable: func(t *testing.T) engine.Backend { return llamaserverBackend(t, gone()) },
	})
}

// TestConformanceOfTheRouterOverNodes runs the suite on a router over two
// real kvwin nodes, as a gateway has.
func TestConformanceOfTheRouterOverNodes(t *testing.T) {
	fleet := func(t *testing.T, backends ...engine.Backend) engine.Backend {
		r, err := router.New(router.Config{}, backends, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	enginetest.Run(t, func(t *testing.T) engine.Backend { return fleet(t, nodeBackend(t), nodeBackend(t)) }, enginetest.Options{
		Caches: true,
		Unreachable: func(t *testing.T) engine.Backend {
			return fleet(t, llamaserverBackend(t, gone()), llamaserverBackend(t, gone()))
		},
	})
}
