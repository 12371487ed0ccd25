package llamaserver

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"kvwin/engine"
)

// The adapter tells its caller the request is accepted once the server
// answered 200 and started its stream, before the first event; a server
// that refuses it with a status never accepted it.
func TestGenerateAccepted(t *testing.T) {
	tests := []struct {
		name       string
		completion http.HandlerFunc // nil: the recorded stream
		want       []string
	}{
		{"streamed", nil, []string{"accepted", "first"}},
		{"refused", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"code": 503, "message": "Loading model", "type": "unavailable_error"}})
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{props: "props_chatml.json", completion: tt.completion})
			b := f.backend(t, Config{})
			var got []string
			ctx := engine.WithAccepted(context.Background(), func() { got = append(got, "accepted") })
			_, _ = b.Generate(ctx, engine.Request{Tokens: []int{101, 102}, Slot: -1, Sampling: engine.DefaultSampling()}, func(ev engine.Event) error {
				if ev.First {
					got = append(got, "first")
				}
				return nil
			})
			if !slices.Equal(got, tt.want) {
				t.Errorf("calls %v, want %v", got, tt.want)
			}
		})
	}
}
