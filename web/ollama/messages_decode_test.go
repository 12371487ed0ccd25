package ollama

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"kvwin/web/core/coretest"
)

var chatBodySeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"Hi."}],"stream":false}`,
	`{"model":"m","messages":[{"role":"USER","content":"a\"b\n\u00fc"},{"role":"assistant","content":null},{"role":null}]}`,
	`{"messages":[{"content":"x","role":"System"},{}],"options":{"temperature":0.1},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`,
	`{"messages":[{"role":"user","content":"x","images":["aGk="]}]}`,
	`{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]}]}`,
	`{"messages":[{"role":"user","content":["x"]}]}`,
	`{"messages":[{"role":"user","content":5}]}`,
	`{"messages":[],"messages":[{"role":"user","content":"x"}]}`,
	`{"Messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}],"keep_alive":"5m","think":true,"format":"json"}`,
	`{"messages":[{"role":"user","content":"x"}],"stream":"yes"}`,
	`{"messages":[{"role":"us\u0065r","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}]`,
	`{"messages":null}`,
}

// DecodeFast takes only valid JSON and gives what encoding/json gives.
func FuzzChatDecodeFastAsDecoded(f *testing.F) {
	for _, s := range chatBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { coretest.AsDecoded(t, b, (*ollamaChatBody).DecodeFast) })
}

// A long conversation's body is taken; the seeds are decoded as
// encoding/json decodes them, fast or not.
func TestChatDecodeFastTakesTheCommonBody(t *testing.T) {
	msgs := []map[string]string{{"role": "system", "content": "Be brief.\nAlways."}}
	for i := range 60 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("ask %d: ü \"quoted\"", i)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("answer %d\t🙂", i)})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": true, "options": map[string]any{"num_predict": 8}})
	if err != nil {
		t.Fatal(err)
	}
	coretest.Taken(t, body, (*ollamaChatBody).DecodeFast)
	taken := 0
	for _, s := range chatBodySeeds {
		var fast, want ollamaChatBody
		ok := fast.DecodeFast([]byte(s))
		err := json.Unmarshal([]byte(s), &want)
		if ok && (err != nil || !reflect.DeepEqual(fast, want)) {
			t.Errorf("%s: fast %#v, want %#v (%v)", s, fast, want, err)
		}
		if ok {
			taken++
		}
	}
	if taken != 4 {
		t.Errorf("%d seeds taken, want the 4 of roles and string or null contents", taken)
	}
}
