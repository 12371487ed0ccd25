package openai

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	"kvwin/web/core/coretest"
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
		if !reflect.DeepEqual([]chatMessage(got), want) {
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

// DecodeFast takes only valid JSON and gives what encoding/json gives.
func FuzzDecodeFastAsDecoded(f *testing.F) {
	for _, s := range fastMessagesSeeds {
		f.Add([]byte(`{"model":"m","messages":` + s + `,"max_tokens":1}`))
	}
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"x"}],"messages":[]}`,
		`{"Messages":[{"role":"user","content":"x"}]}`,
		`{"m\u0065ssages":[{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"temperature":0.5,"stop":["\n"],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`,
		`{"messages":[{"role":"user","content":"bad \x01"}]}`,
		`{"messages":[{"role":"user","content":"x"}] "max_tokens":1}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":"1"}`,
		`{"a":"\"messages\":[]","messages":[{"role":"user","content":"\ud83d\ude00"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},]}]}`,
		`{"messages":[{"role":"user","content":"x"}]}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { coretest.AsDecoded(t, b, (*chatRequest).DecodeFast) })
}

// A long conversation's body is taken by DecodeFast; the bodies it must
// leave to encoding/json are left.
func TestDecodeFastTakesTheCommonBody(t *testing.T) {
	msgs := []map[string]string{{"role": "system", "content": "Be brief.\nAlways."}}
	for i := range 60 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("ask %d: ü \"quoted\" <|im_end|>", i)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("answer %d\t🙂", i)})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 8, "temperature": 0, "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	coretest.Taken(t, body, (*chatRequest).DecodeFast)
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"x"}],"messages":[{"role":"user","content":"y"}]}`,
		`{"MESSAGES":[{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":1,}`,
	} {
		var r chatRequest
		if r.DecodeFast([]byte(s)) {
			t.Errorf("%s: taken", s)
		}
	}
}
