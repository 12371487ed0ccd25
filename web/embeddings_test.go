package web

import (
	"testing"

	"kvwin/web/core"
)

func TestEmbeddingsInputErrorsAndABackendThatCannot(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"no input", `{"model":"tiny"}`, 400, core.CodeMissingParameter},
		{"empty string", `{"input":""}`, 400, core.CodeInvalidValue},
		{"token ids", `{"input":[[1,2,3]]}`, 400, core.CodeInvalidType},
		{"bad encoding", `{"input":"hi","encoding_format":"int8"}`, 400, core.CodeInvalidValue},
		{"unknown model", `{"model":"other","input":"hi"}`, 404, core.CodeModelNotFound},
		// The fake backend has no Embedder: the route exists, the backend cannot.
		{"backend cannot", `{"input":["a","b"]}`, 501, "not_supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, ts, "POST", "/v1/embeddings", tc.body)
			typ := core.TypeInvalidRequest
			wantError(t, resp, body, tc.status, typ, tc.code)
		})
	}
}
