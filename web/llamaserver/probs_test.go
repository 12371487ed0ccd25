package llamaserver

import (
	"encoding/json"
	"testing"

	"kvwin/engine"
)

// nodeProbsOf writes llama-server's newer shape: a token holding part of
// a UTF-8 character has its text cut to the whole characters and all its
// bytes in "bytes", which is what a kvwin gateway reads back.
func TestNodeProbsShape(t *testing.T) {
	lps := []engine.TokenLogprob{
		{Token: "a\xc3", Bytes: []byte("a\xc3"), Logprob: -0.5, Top: []engine.TopLogprob{
			{Token: "a\xc3", Bytes: []byte("a\xc3"), Logprob: -0.5}, {Token: "é", Bytes: []byte("é"), Logprob: -1.25}}},
		{Token: "\xa9", Bytes: []byte{0xa9}, Logprob: -0.125},
	}
	got, err := json.Marshal(nodeProbsOf(lps))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"token":"a","bytes":[97,195],"logprob":-0.5,"top_logprobs":[{"token":"a","bytes":[97,195],"logprob":-0.5},{"token":"é","bytes":[195,169],"logprob":-1.25}]},` +
		`{"token":"","bytes":[169],"logprob":-0.125,"top_logprobs":[]}]`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
