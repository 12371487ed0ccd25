package web

import (
	"net/http"
	"strings"
	"testing"
)

// textHead is what every legacy completion object of a test response starts with.
const textHead = `{"id":"cmpl-test","object":"text_completion","created":1700000000,"model":"tiny",`

func TestCompletionsBytes(t *testing.T) {
	usage := `"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":4}}`
	streamBody := sse(textHead+`"choices":[{"text":"Once","index":0,"logprobs":null,"finish_reason":null}]}`) +
		sse(textHead+`"choices":[{"text":" upon","index":0,"logprobs":null,"finish_reason":null}]}`) +
		sse(textHead+`"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}]}`)
	tests := []struct {
		name        string
		body        string
		contentType string
		want        string
	}{
		{"non-stream", `{"prompt":"p"}`, "application/json; charset=utf-8",
			textHead + `"choices":[{"text":"Once upon","index":0,"logprobs":null,"finish_reason":"stop"}],` + usage + "}\n"},
		{"stream", `{"prompt":"p","stream":true}`, "text/event-stream",
			streamBody + sse("[DONE]")},
		{"stream with usage", `{"prompt":"p","stream":true,"stream_options":{"include_usage":true}}`, "text/event-stream",
			streamBody + sse(textHead+`"choices":[],`+usage+`}`) + sse("[DONE]")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake().Script("stop", engineTimings(9, 4, 2), firstEvent(9, 4), textEvent("Once"), textEvent(" upon"))
			ts := startServer(t, f, Config{}, nil)
			resp, got := do(t, ts, http.MethodPost, completionPath, tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, got)
			}
			if string(got) != tt.want {
				t.Errorf("body =\n%s\nwant\n%s", got, tt.want)
			}
			for k, v := range map[string]string{
				"Content-Type": tt.contentType, HeaderBackend: "fake-0", HeaderPromptTokens: "9", HeaderCachedTokens: "4",
			} {
				// Headers of a whole answer, trailers of a stream.
				if got := resp.Header.Get(k) + resp.Trailer.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if strings.Contains(string(got), `"role"`) {
				t.Errorf("a legacy completion carries a role: %s", got)
			}
		})
	}
}
