package openai

import (
	"encoding/json"
	"testing"

	"kvwin/web/core"
)

// A message's content read without the decoder is what the decoder gives,
// and anything with an escape goes to the decoder.
func TestMessageContentAsDecoded(t *testing.T) {
	for _, raw := range []string{`""`, `"plain text"`, `"ü 🙂 <|im_end|>"`, `"a\"b"`, `"tab\there"`, `"\u00fc"`, `"\\"`, `"line\nbreak"`, `"/\/"`} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		got, err := messageContent(json.RawMessage(raw), 0)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", raw, got, err, want)
		}
		if _, fast := core.PlainString([]byte(raw)); fast != (want == raw[1:len(raw)-1]) {
			t.Errorf("%s: read without the decoder %v", raw, fast)
		}
	}
}
