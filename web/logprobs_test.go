package web

import (
	"strings"
	"testing"

	"kvwin/engine"
)

// Log-probabilities reach the wire in OpenAI's shapes, streamed with the
// text they belong to and whole; and the request asks the backend for them.
func TestLogprobsOnTheWire(t *testing.T) {
	hi := engine.TokenLogprob{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.5,
		Top: []engine.TopLogprob{{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.5}, {Token: "Yo", Bytes: []byte("Yo"), Logprob: -1.5}}}
	events := []engine.Event{{First: true}, {Text: "Hi", Logprobs: []engine.TokenLogprob{hi}}}
	const chatLP = `"logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[` +
		`{"token":"Hi","logprob":-0.5,"bytes":[72,105]},{"token":"Yo","logprob":-1.5,"bytes":[89,111]}]}],"refusal":null}`
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,"stream":true}`,
			`"delta":{"content":"Hi"},` + chatLP + `,"finish_reason":null`},
		{"chat whole", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2}`,
			`"content":"Hi"},` + chatLP + `,"finish_reason":"stop"`},
		{"completions stream", "/v1/completions", `{"prompt":"x","logprobs":2,"stream":true}`,
			`"text":"Hi","index":0,"logprobs":{"tokens":["Hi"],"token_logprobs":[-0.5],"top_logprobs":[{"Hi":-0.5,"Yo":-1.5}],"text_offset":[0]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake().Script(engine.FinishStop, engine.Timings{PromptTokens: 3}, events...)
			f.Result.Logprobs = []engine.TokenLogprob{hi}
			ts := startServer(t, f, Config{}, nil)
			resp, body := do(t, ts, "POST", tc.path, tc.body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), tc.want) {
				t.Fatalf("status %d, body\n%s\nwant it to hold\n%s", resp.StatusCode, body, tc.want)
			}
			if r := f.Requests()[0]; !r.Logprobs || r.TopLogprobs != 2 {
				t.Errorf("backend asked for logprobs %v, top %d; want true, 2", r.Logprobs, r.TopLogprobs)
			}
		})
	}
}
