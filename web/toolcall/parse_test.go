package toolcall

import (
	"strconv"
	"strings"
	"testing"
)

// The call parser gives the same calls and content whether the answer
// comes whole or byte by byte, and streams each call as OpenAI does: the
// first delta with id, type and name, then arguments fragments only.
func TestCallParserWholeAndByteByByte(t *testing.T) {
	tests := []struct {
		name, text, content string
		calls               []CallFunction
	}{
		{"one call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\", \"n\": [1, {\"x\": \"\\\"\"}]}}\n</tool_call>", "",
			[]CallFunction{{Name: "get_weather", Arguments: `{"city": "Pa}ris", "n": [1, {"x": "\""}]}`}}},
		{"compact, two calls", `<tool_call>` + "\n" + `{"name":"a","arguments":{}}` + "\n</tool_call>\n<tool_call>\n" + `{"name":"b","arguments":{"k":1}}` + "\n</tool_call>", "",
			[]CallFunction{{Name: "a", Arguments: `{}`}, {Name: "b", Arguments: `{"k":1}`}}},
		{"text, then a call", "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "Let me look.",
			[]CallFunction{{Name: "f", Arguments: `{"a": 1}`}}},
		{"text ending in whitespace", "Hello there \n ", "Hello there \n ", nil},
		{"plain text", "Hello <b>there</b>, no call", "Hello <b>there</b>, no call", nil},
		{"text that looks like a call but is not", "<tool_calls are fun", "<tool_calls are fun", nil},
		{"a cut call is not content", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", "", []CallFunction{{Name: "f", Arguments: `{"a": 1`}}},
	}
	single := "<tool_call>\n" + `{"name":"a","arguments":{}}` + "\n</tool_call>\n<tool_call>\n" + `{"name":"b","arguments":{"k":1}}` + "\n</tool_call>"
	for _, step := range []int{len(single), 1} {
		p := &Parser{NewID: func() string { return "call_1" }, Single: true}
		var content string
		for i := 0; i < len(single); i += step {
			content += p.Feed(single[i:min(i+step, len(single))]).Content
		}
		if len(p.Calls) != 1 || p.Calls[0].Function.Name != "a" || content+p.Flush().Content != "" {
			t.Errorf("parallel_tool_calls false, step %d: calls %+v", step, p.Calls)
		}
	}
	for _, tt := range tests {
		for _, step := range []int{len(tt.text), 1, 3} {
			t.Run(tt.name+"/step "+strconv.Itoa(step), func(t *testing.T) {
				n := 0
				p := &Parser{NewID: func() string { n++; return "call_" + strconv.Itoa(n) }}
				var content strings.Builder
				var firsts []CallDelta
				args := map[int]string{}
				for i := 0; i < len(tt.text); i += step {
					got := p.Feed(tt.text[i:min(i+step, len(tt.text))])
					content.WriteString(got.Content)
					for _, d := range got.Deltas {
						if d.ID != "" {
							firsts = append(firsts, d)
						} else if d.Function.Name != "" || d.Type != "" {
							t.Fatalf("a later delta carries more than arguments: %+v", d)
						}
						args[d.Index] += d.Function.Arguments
					}
				}
				content.WriteString(p.Flush().Content)
				if content.String() != tt.content || len(firsts) != len(tt.calls) {
					t.Fatalf("content %q, %d calls; want %q, %d", content.String(), len(firsts), tt.content, len(tt.calls))
				}
				for i, want := range tt.calls {
					if firsts[i].Function.Name != want.Name || firsts[i].Type != "function" || args[i] != want.Arguments || p.Calls[i].Function != want {
						t.Errorf("call %d: first %+v, arguments %q, parsed %+v; want %+v", i, firsts[i], args[i], p.Calls[i].Function, want)
					}
				}
			})
		}
	}
}
