package toolcall

import (
	"fmt"
	"strings"
	"testing"

	"kvwin/engine"
)

// generated is an answer as the test model writes a forced call: compact,
// and unlike how renderCalls writes the call back.
const generated = "<tool_call>\n" + `{"name":"write_file","arguments":{"path":"a—b.txt","n":1.0,"opts":{"z":[1,2],"a":null},"big":9007199254740993}}` + "\n</tool_call>"

// A client's re-serialisation of a call means what the model wrote, and
// is recalled as the model's text; anything that says something else, or
// says it for another tenant, is not.
func TestAnswersRecallOnlyWhatMeansTheSame(t *testing.T) {
	same := `{"opts": {"a": null, "z": [1, 2]}, "n": 1, "path": "a\u2014b.txt", "big": 9007199254740993}`
	tests := []struct {
		name, tenant, content string
		calls                 []Call
		recalled              bool
	}{
		{"as generated", "t1", "", call("write_file", generated[len("<tool_call>\n{\"name\":\"write_file\",\"arguments\":"):len(generated)-len("}\n</tool_call>")]), true},
		{"re-serialised: spacing, key order, escaping, number notation", "t1", "", call("write_file", same), true},
		{"whitespace-only text before the call", "t1", " \n", call("write_file", same), true},
		{"another tenant", "t2", "", call("write_file", same), false},
		{"another value", "t1", "", call("write_file", strings.Replace(same, "a\\u2014b", "a-b", 1)), false},
		{"a big number rounded as a float64 rounds it", "t1", "", call("write_file", strings.Replace(same, "993", "992", 1)), false},
		{"another name", "t1", "", call("read_file", same), false},
		{"text before the call", "t1", "Writing.", call("write_file", same), false},
		{"a second call", "t1", "", append(call("write_file", same), call("write_file", same)...), false},
		{"a key twice", "t1", "", call("write_file", strings.Replace(same, `"n": 1`, `"n": 1, "n": 1`, 1)), false},
		{"the text before another answer's call", "t1", "Reading it.", call("read_file", `{"path": "x"}`), true},
		{"that call without its text", "t1", "", call("read_file", `{"path": "x"}`), false},
	}
	withText := "Reading it. \n\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\":\"x\"}}\n</tool_call>\n"
	a := NewAnswers(0)
	a.Remember("t1", generated)
	a.Remember("t1", withText)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Message(engine.RoleAssistant, tt.content, tt.calls, "messages[1]")
			if err != nil {
				t.Fatal(err)
			}
			msgs := []engine.Message{{Role: engine.RoleUser, Content: "write it"}, m}
			got, n := a.Recall(tt.tenant, msgs)
			if recalled := n == 1 && (got[1].Content == generated || got[1].Content == withText); recalled != tt.recalled {
				t.Errorf("recalled %v (%d replaced: %q), want %v", recalled, n, got[1].Content, tt.recalled)
			}
			if msgs[1] != m {
				t.Error("Recall modified the messages it was given")
			}
		})
	}
}

func call(name, args string) []Call {
	return []Call{{ID: "call_1", Type: "function", Function: CallFunction{Name: name, Arguments: args}}}
}

// Only text followed by whole calls is remembered: a call cut short, text
// after the calls or unsound JSON would let another text stand for it.
func TestAnswersRememberOnlyWholeCalls(t *testing.T) {
	whole := "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>\n"
	tests := []struct {
		name, text string
		kept       bool
	}{
		{"text then two calls", whole, true},
		{"no call", "just text", false},
		{"cut in the arguments", whole[:40], false},
		{"no closing marker", strings.TrimSuffix(whole, "</tool_call>\n"), false},
		{"text after the calls", whole + "and more", false},
		{"a third key", "<tool_call>{\"name\":\"f\",\"arguments\":{},\"x\":1}</tool_call>", false},
		{"arguments not an object", "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", false},
		{"a lone surrogate", "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"\\ud800\"}}</tool_call>", false},
		{"invalid UTF-8", "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"\xff\"}}</tool_call>", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAnswers(0)
			a.Remember("t", tt.text)
			if kept := a.order.Len() > 0; kept != tt.kept {
				t.Errorf("kept %v, want %v", kept, tt.kept)
			}
		})
	}
}

// A client told of the first of two calls (parallel_tool_calls false)
// sends back the first: it is recalled as the answer up to that call's end.
func TestAnswersRecallTheFirstCalls(t *testing.T) {
	two := "<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":\"b\",\"arguments\":{\"k\":1}}\n</tool_call>"
	a := NewAnswers(0)
	a.Remember("t", two)
	for _, tt := range []struct {
		calls []Call
		want  string
	}{
		{call("a", "{}"), two[:strings.Index(two, "\n<tool_call>")]},
		{append(call("a", "{}"), call("b", `{"k": 1.0}`)...), two},
		{call("b", `{"k": 1}`), ""},
	} {
		m, _ := Message(engine.RoleAssistant, "", tt.calls, "")
		got, n := a.Recall("t", []engine.Message{m})
		if tt.want == "" && n != 0 || tt.want != "" && got[0].Content != tt.want {
			t.Errorf("%d calls: recalled %d, %q; want %q", len(tt.calls), n, got[0].Content, tt.want)
		}
	}
}

// The texts held stay within the byte bound, least recently used out.
func TestAnswersBounded(t *testing.T) {
	text := func(i int) string {
		return fmt.Sprintf("<tool_call>{\"name\":\"f\",\"arguments\":{\"i\":\"%02d\",\"pad\":\"%s\"}}</tool_call>", i, strings.Repeat("x", 40))
	}
	size := len(text(0))
	a := NewAnswers(16 * size)
	for i := range 20 {
		a.Remember("t", text(i))
		if i == 10 {
			if _, ok := a.recall("t", text(0)); !ok { // 0 becomes the most recently used
				t.Fatal("answer 0 forgotten early")
			}
		}
	}
	if a.bytes > 16*size || a.order.Len() != 16 {
		t.Fatalf("%d bytes in %d answers; bound %d", a.bytes, a.order.Len(), 16*size)
	}
	for i, want := range map[int]bool{0: true, 1: false, 4: false, 5: true, 19: true} {
		if _, ok := a.recall("t", text(i)); ok != want {
			t.Errorf("answer %d held %v, want %v", i, ok, want)
		}
	}
}

func TestDecimal(t *testing.T) {
	for lit, want := range map[string]string{"0": "0", "-0.0": "0", "1.0": "1e0", "100": "1e2", "1e2": "1e2", "1E+2": "1e2",
		"-1.50e1": "-15e0", "0.001": "1e-3", "9007199254740993": "9007199254740993e0"} {
		if got, err := decimal(lit); err != nil || got != want {
			t.Errorf("decimal(%q) = %q, %v; want %q", lit, got, err, want)
		}
	}
}

// A rendering recalled once is found again by its alias, and leaves with
// its answer.
func TestAnswersAliasesLeaveWithTheirAnswer(t *testing.T) {
	a := NewAnswers(64 * len(generated))
	a.Remember("t1", generated)
	m, _ := Message(engine.RoleAssistant, "", call("write_file", `{"path": "a—b.txt", "n": 1, "opts": {"z": [1, 2], "a": null}, "big": 9007199254740993}`), "")
	for range 2 {
		if got, n := a.Recall("t1", []engine.Message{m}); n != 1 || got[0].Content != generated {
			t.Fatalf("recalled %d: %q", n, got[0].Content)
		}
	}
	if len(a.byAlias) != 1 || a.bytes != len(generated)+(alias{"t1", m.Content}).size() {
		t.Fatalf("%d aliases, %d bytes", len(a.byAlias), a.bytes)
	}
	if _, n := a.Recall("t2", []engine.Message{m}); n != 0 {
		t.Fatal("another tenant found the alias")
	}
	for i := 0; len(a.byMean) > 0 && a.byMean[mustMean(t, "t1", generated)] != nil; i++ {
		a.Remember("t1", fmt.Sprintf("<tool_call>{\"name\":\"f\",\"arguments\":{\"i\":%d}}</tool_call>", i))
	}
	if len(a.byAlias) != 0 {
		t.Fatalf("%d aliases outlived their answer", len(a.byAlias))
	}
	total := 0
	for el := a.order.Front(); el != nil; el = el.Next() {
		total += len(el.Value.(*answer).text)
	}
	if a.bytes != total || a.bytes > a.maxBytes {
		t.Fatalf("%d bytes counted, %d held, bound %d", a.bytes, total, a.maxBytes)
	}
}

func mustMean(t *testing.T, tenant, text string) meaning {
	t.Helper()
	m, err := meaningOf(tenant, text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Whatever the model writes, reading it never panics, and an answer that
// means something means the same once parsed as a client reads it and
// rendered back as the client sends it.
func FuzzAnswerMeaning(f *testing.F) {
	f.Add(generated)
	f.Add("Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"\\u00e9\"}]}}\n</tool_call>")
	f.Add("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{\"k\":-0.5e-3}}</tool_call>\n")
	f.Add("<tool_call>{\"name\":\"a\",\"arguments\":{\"s\":\"\\ud83d\\ude00\"}}</tool_call>")
	f.Fuzz(func(t *testing.T, text string) {
		said, err := meaningsOf("t", text)
		if err != nil {
			return
		}
		p := &Parser{NewID: func() string { return "id" }}
		content := p.Feed(text).Content + p.Flush().Content
		m, err := Message(engine.RoleAssistant, content, p.Calls, "")
		if err != nil {
			t.Fatalf("%q: the parsed calls do not render: %v", text, err)
		}
		back, err := meaningOf("t", m.Content)
		if err != nil || back != said[len(said)-1].mean {
			t.Fatalf("%q means something else once parsed (%q, %d calls) and rendered as %q: %v", text, content, len(p.Calls), m.Content, err)
		}
	})
}
