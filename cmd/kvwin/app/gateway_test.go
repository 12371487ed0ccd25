package app

import (
	"strings"
	"testing"

	"kvwin/engine/llamaserver"
	"kvwin/engine/ollama"
)

// --backend values find their kind in the table, which builds the adapter
// of that kind with the URL's options; malformed values say what is wanted.
func TestBackendKinds(t *testing.T) {
	tests := []struct {
		spec    string
		want    string // the adapter's type, or the error's words
		wantErr bool
	}{
		{"llamaserver=http://127.0.0.1:1", "llamaserver", false},
		{"ollama=http://127.0.0.1:1?model=qwen3:0.6b&name=o1", "ollama", false},
		{"ollama=http://127.0.0.1:1", "model", true},
		{"vllm=http://127.0.0.1:1", `unknown kind "vllm" (want llamaserver or ollama)`, true},
		{"http://127.0.0.1:1", "want KIND=URL", true},
		{"llamaserver=", "want KIND=URL", true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			kind, url, err := parseBackend(tt.spec)
			if err == nil {
				b, openErr := kind.open(url, backendOptions{log: NewLogger(100)})
				if openErr == nil {
					defer b.Close()
					switch b.(type) {
					case *llamaserver.Backend:
						if tt.want != "llamaserver" {
							t.Fatalf("%s built a llama-server backend", tt.spec)
						}
					case *ollama.Backend:
						if tt.want != "ollama" || b.Info().Name != "o1" || b.Info().Model != "qwen3:0.6b" {
							t.Fatalf("%s built %+v", tt.spec, b.Info())
						}
					}
				}
				err = openErr
			}
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("%s: error %v, want error %v mentioning %q", tt.spec, err, tt.wantErr, tt.want)
			}
		})
	}
}
