package openai

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// fastMessagesSeeds are bodies' messages arrays the fast path takes and
// ones it must leave to encoding/json.
var fastMessagesSeeds = []string{
	`[{"role":"user","content":"Hi."}]`,
	` [ { "content" : "a\"b\\n\u00fc" , "role" : "assistant" } , {"role":"user","content":null} ] `,
	`[{"role":"user","content":[{"type":"text","text":"x ] } \" ["}]}]`,
	`[{"role":"user","content":{"a":[1,{"b":"}"}]}}]`,
	`[{"role":"user","content":"one","content":"two","role":"system"}]`,
	`[]`, `[{}]`, `null`, `[{"role":"user"}]`,
	`[{"Role":"user","content":"case"}]`,
	`[{"role":"us\u0065r","content":"escaped role"}]`,
	`[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]`,
	`[{"role":"user","content":5}]`, `[{"role":5,"content":"x"}]`, `[1]`, `["x"]`, `{"role":"user"}`,
}

// The fast path gives what encoding/json gives, for every input it takes.
func FuzzMessageListAsDecoded(f *testing.F) {
	for _, s := range fastMessagesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return // decodeBody refuses both before any decoding
		}
		got, ok := fastMessages(b)
		if !ok {
			return
		}
		var want []chatMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%s: fast path took what encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n fast %#v\n want %#v", b, got, want)
		}
	})
}

// The seeds: which are taken fast, and every one decodes through the
// request type as encoding/json decodes []chatMessage.
func TestMessageListDecodes(t *testing.T) {
	taken := 0
	for _, s := range fastMessagesSeeds {
		var want []chatMessage
		wantErr := json.Unmarshal([]byte(s), &want)
		var got messageList
		gotErr := json.Unmarshal([]byte(s), &got)
		if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual([]chatMessage(got), want) {
			t.Errorf("%s: got %#v, %v; want %#v, %v", s, got, gotErr, want, wantErr)
		}
		if _, ok := fastMessages([]byte(s)); ok {
			taken++
		}
	}
	if taken != 8 {
		t.Errorf("the fast path took %d seeds, want the 8 arrays of objects of a plain role and a content", taken)
	}
}
