package llamaserver

import (
	"encoding/json"
	"reflect"
	"testing"

	"kvwin/web/core/coretest"
)

// The /completion bodies a gateway sends (token ids), and shapes the fast
// decoder must leave to encoding/json.
var nodeCompletionSeeds = []string{
	`{"prompt":[1,2,3],"id_slot":-1,"cache_prompt":true,"n_keep":-1,"n_predict":1,"stream":false}`,
	` { "prompt" : [ 7 ] , "n_predict": 4 } `,
	`{"prompt":"text","n_predict":1}`,
	`{"prompt":["text"]}`,
	`{"prompt":[1,2],"prompt":[3]}`,
	`{"PROMPT":[1]}`,
	`{"prompt":[1],"n_predict":"x"}`,
	`{"prompt":[1.5]}`,
	`{"prompt":[1,null]}`,
	`{"prompt":[1]`,
}

func FuzzNodeCompletionDecodeFastAsDecoded(f *testing.F) {
	for _, s := range nodeCompletionSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { coretest.AsDecoded(t, b, (*nodeCompletionRequest).DecodeFast) })
}

// TestNodeCompletionDecodeFastTakesTheGatewayBody: a gateway's body, a
// prompt of token ids, is taken and decoded as encoding/json decodes it;
// the other seeds are checked against encoding/json too.
func TestNodeCompletionDecodeFastTakesTheGatewayBody(t *testing.T) {
	ids := make([]int, 5000)
	for i := range ids {
		ids[i] = i * 37 % 32000
	}
	body, err := json.Marshal(map[string]any{"prompt": ids, "id_slot": -1, "cache_prompt": true, "n_keep": -1, "n_predict": 1, "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	coretest.Taken(t, body, (*nodeCompletionRequest).DecodeFast)
	for i, s := range nodeCompletionSeeds {
		coretest.AsDecoded(t, []byte(s), (*nodeCompletionRequest).DecodeFast)
		var r nodeCompletionRequest
		if taken := r.DecodeFast([]byte(s)); taken != (i < 2) {
			t.Errorf("%s: taken %v, want %v", s, taken, i < 2)
		}
	}
	var r nodeCompletionRequest
	r.DecodeFast(body)
	if !reflect.DeepEqual([]byte(r.Prompt), body[len(`{"cache_prompt":true,"id_slot":-1,"n_keep":-1,"n_predict":1,"prompt":`):len(body)-len(`,"stream":true}`)]) {
		t.Errorf("prompt %.40s…, want the body's ids", r.Prompt)
	}
}
