package router

import (
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
)

// TestConformance runs the engine.Backend conformance suite on a router
// over enginetest fakes: plain ones, ones with every ability (which the
// router then delegates), and those with one of them down. A router whose backends are all unavailable
// is the suite's unreachable backend.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(*enginetest.Backend) engine.Backend
		down string // a backend that fails every request with ErrUnavailable
	}{
		{"plain", func(b *enginetest.Backend) engine.Backend { return b }, ""},
		{"abilities", func(b *enginetest.Backend) engine.Backend { return enginetest.NewFull(b) }, ""},
		{"one down", func(b *enginetest.Backend) engine.Backend { return enginetest.NewFull(b) }, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fleet := func(t *testing.T, err error) engine.Backend {
				var bs []engine.Backend
				for _, name := range []string{"a", "b"} {
					f := enginetest.New(engine.Info{Name: name, Model: "tiny", ContextSlot: 512, Slots: 2})
					f.Err = err
					if name == c.down {
						f.Err = engine.ErrUnavailable
					}
					bs = append(bs, c.wrap(f))
				}
				r, err := New(Config{}, bs, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				return r
			}
			enginetest.Run(t, func(t *testing.T) engine.Backend { return fleet(t, nil) }, enginetest.Options{
				Caches:      true,
				Unreachable: func(t *testing.T) engine.Backend { return fleet(t, engine.ErrUnavailable) },
			})
		})
	}
}
