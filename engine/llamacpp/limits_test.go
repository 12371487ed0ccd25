package llamacpp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// nested returns open×n + inner + close×n.
func nested(open, inner, close string, n int) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

func enumSchema(n int) string {
	var b strings.Builder
	b.WriteString(`{"enum":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"value%d"`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func propsSchema(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"integer"}`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

func requiredSchema(n int) string {
	var b, req strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
			req.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"integer"}`, i)
		fmt.Fprintf(&req, `"p%d"`, i)
	}
	b.WriteString(`},"required":[` + req.String() + `]}`)
	return b.String()
}

// requiredShortest is the length of {"p0":0,"p1":0,…} with n keys.
func requiredShortest(n int) int {
	total := 2 + n - 1 // braces and commas
	for i := range n {
		total += len(fmt.Sprintf(`"p%d":0`, i))
	}
	return total
}

// asciiGrammar initialises a grammar over printable ASCII the way the
// budget keeper does (llama.NewGrammar), to show llama.cpp accepts what
// kvwin's checks let through.
func asciiGrammar(t *testing.T, g string) {
	t.Helper()
	var ids []uint32
	var pieces []string
	for c := byte(' '); c <= '~'; c++ {
		ids, pieces = append(ids, uint32(c)), append(pieces, string(c))
	}
	gr := llama.NewGrammar(g, ids, pieces, []int32{0})
	if gr == nil {
		t.Fatalf("llama.cpp refused the grammar kvwin accepted")
	}
	gr.Free()
}

// Every hostile schema of the issue, at its size and ten times it, is
// refused naming the limit it breaks; ordinary schemas of the sizes the
// limits were chosen for convert, initialise and report their shortest
// output.
func TestSchemaLimits(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		refuse       string // part of the error; "" to accept
		shortest     int    // when accepted; -1 for none finite
	}{
		{"maxLength 10^6", `{"type":"string","maxLength":1000000}`, "limit on repetition counts", 0},
		{"maxLength 10^8", `{"type":"string","maxLength":100000000}`, "limit on repetition counts", 0},
		{"maxItems 10^7", `{"type":"array","items":{"type":"integer"},"maxItems":10000000}`, "limit on repetition counts", 0},
		{"minLength negative", `{"type":"string","minLength":-1}`, "non-negative integer", 0},
		{"array depth 5000", nested(`{"type":"array","items":`, `{"type":"string"}`, `}`, 5000), "limit on schema depth", 0},
		{"array depth 50000", nested(`{"type":"array","items":`, `{"type":"string"}`, `}`, 50000), "limit on schema depth", 0},
		{"pattern 50000 groups", `{"type":"string","pattern":"` + nested("(", "a", ")", 50000) + `"}`, "limit on pattern size", 0},
		{"pattern 500000 groups", `{"type":"string","pattern":"` + nested("(", "a", ")", 500000) + `"}`, "limit on pattern size", 0},
		{"pattern 300 groups", `{"type":"string","pattern":"` + nested("(", "a", ")", 300) + `"}`, "limit on grammar nesting", 0},
		{"pattern {100000}", `{"type":"string","pattern":"^[a-z]{100000}$"}`, "limit on repetition counts", 0},
		{"pattern nested {0,100}", `{"type":"string","pattern":"^((a|b){0,100}){0,100}$"}`, "limit on grammar ambiguity", 0},
		{"pattern with a stray }", `{"type":"string","pattern":"^((a|b)0,100}){0,100}$"}`, "closes no {m,n}", 0},
		{"pattern a{x}", `{"type":"string","pattern":"^a{x}$"}`, "starts no {m}", 0},
		{"pattern with an open {", `{"type":"string","pattern":"^a{3,8$"}`, "starts no {m}", 0},
		{"pattern {1,2,3}", `{"type":"string","pattern":"^a{1,2,3}$"}`, "starts no {m}", 0},
		{"a second pattern key", `{"type":"string","pattern":"^a$","pattern":"^a{3,8$"}`, "starts no {m}", 0},
		{"pattern with a stray ]", "{\"type\":\"string\",\"pattern\":\"^\xff\xff\x7f\xff]{3,8}$\"}", "closes no character class", 0},
		{"pattern with an open class", `{"type":"string","pattern":"^[abc$"}`, "not closed", 0},
		{"pattern with nothing to repeat", `{"type":"string","pattern":"^*a$"}`, "nothing to repeat", 0},
		{"pattern with a non-capturing group", `{"type":"string","pattern":"^(?:ab)+$"}`, "not supported", 0},
		{"pattern with a group", `{"type":"string","pattern":"^(ab)+$"}`, "", 4},
		{"pattern nested {0,500}", `{"type":"string","pattern":"^((a|b){0,500}){0,500}$"}`, "limit on grammar ambiguity", 0},
		{"required recursion", `{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"}`, "", -1},
		{"root ref to ref", `{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"string"}}}`, "", 2},
		{"root ref cycle", `{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}}`, "cycle", 0},
		{"number minimum", `{"type":"number","minimum":0.5}`, "cannot enforce", 0},
		{"untyped maximum", `{"maximum":3}`, "cannot enforce", 0},
		{"minProperties", `{"type":"object","additionalProperties":{"type":"string"},"minProperties":3}`, "cannot enforce", 0},
		{"tuple minItems", `{"type":"array","prefixItems":[{"type":"string"}],"minItems":3}`, "cannot enforce", 0},
		{"integer bounds", `{"type":["integer","null"],"minimum":-5,"maximum":300}`, "", 1},
		{"a property named minimum", `{"type":"object","properties":{"minimum":{"type":"integer"}},"required":["minimum"]}`, "", len(`{"minimum":0}`)},
		{"array depth 100", nested(`{"type":"array","items":`, `{"type":"string"}`, `}`, 100), "", 2},
		{"object depth 64", nested(`{"type":"object","required":["a"],"properties":{"a":`, `{"type":"integer"}`, `}}`, 64), "", 64*6 + 1},
		{"enum 100000", enumSchema(100000), "", len(`"value0"`)},
		{"200 optional properties", propsSchema(200), "", 2},
		{"300 optional properties", propsSchema(300), "limit on grammar ambiguity", 0},
		{"1000 required properties", requiredSchema(1000), "", requiredShortest(1000)},
		{"pattern [a-z]{3,8}", `{"type":"string","pattern":"^[a-z]{3,8}$"}`, "", 5},
		{"maxLength 1000", `{"type":"string","minLength":10,"maxLength":1000}`, "", 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, short, err := outputGrammar(&engine.Output{Schema: []byte(tc.schema)})
			if tc.refuse != "" {
				if !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("err %v, want invalid naming %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if short != tc.shortest {
				t.Errorf("shortest output %d characters, want %d", short, tc.shortest)
			}
			asciiGrammar(t, g)
		})
	}
}

// The raw grammar field is read before llama.cpp sees it: the inputs that
// crashed or stalled it are refused naming the limit, at the size
// and ten times it.
func TestGrammarLimits(t *testing.T) {
	for _, tc := range []struct {
		name, grammar string
		refuse        string
		shortest      int
	}{
		{"100000 nested parentheses", `root ::= ` + nested("(", `"a"`, ")", 100000), "limit on grammar nesting", 0},
		{"1000000 nested parentheses", `root ::= ` + nested("(", `"a"`, ")", 1000000), "limit on grammar nesting", 0},
		{"5 MB grammar", `root ::= "` + strings.Repeat("a", 5<<20) + `"`, "limit on grammar size", 0},
		{"huge repetition", `root ::= "a"{0,4294967297}`, "limit on repetition counts", 0},
		{"nested optional repetitions", `root ::= (("a" | "b"){0,100}){0,100}`, "limit on grammar ambiguity", 0},
		{"long rule chain", chain(100000), "limit on grammar nesting", 0},
		{"left recursion", `root ::= root "a" | "b"`, "left-recursive", 0},
		{"unbounded repetition of an empty-matching group", `root::=(("a "|"b"){0,}){0,}`, "repeats without bound", 0},
		{"star of an optional", `root ::= ("a"?)*`, "repeats without bound", 0},
		{"plus of a rule that can be empty", "root ::= x+\nx ::= \"\" | \"a\"", "repeats without bound", 0},
		{"bounded repetition of an optional", `root ::= ("a"?){0,5} "b"`, "", 1},
		{"star of a non-empty group", `root ::= ("a" "b"?)* "c"`, "", 1},
		{"undefined rule", `root ::= other`, "not defined", 0},
		{"NUL byte", "root ::= \"a\x00\"", "NUL", 0},
		{"unterminated", `root ::= "a`, "does not parse", 0},
		{"no root", `other ::= "a"`, "root", 0},
		{"ordinary", `root ::= "yes" | "no" | [0-9]{3,8}`, "", 2},
		{"recursion", `root ::= "(" root ")" | "x"`, "", 1},
		// Found by FuzzRawGrammar: llama.cpp's stacks grew until the
		// fuzzer's worker hung.
		{"repeated recursion that can be empty", `root ::= (("a" | "b")root{0,100}){0,100}`, "on a cycle through rule", 0},
		{"repeated recursion, through another rule", "root ::= (\"a\" y{0,9}){0,9}\ny ::= root", "on a cycle through rule", 0},
		{"repeated recursion that cannot be empty", `root ::= "(" root{0,3} ")" | "x"`, "", 1},
		{"infinite", `root ::= "(" root ")"`, "", -1},
		// Found by FuzzRawGrammar: after x returns, the nested optionals
		// are empty 14 ways, and each level of x multiplies them.
		{"recursion followed by nested optionals", "root::=x\nx::=.x.??????????????|", "can be empty 14 ways", 0},
		{"recursion followed by a rule empty two ways", "root ::= x\nx ::= \"a\" x y | \"\"\ny ::= \"b\"? | \"\"", "can be empty 2 ways", 0},
		{"recursion through another rule, then two empty ways", "root ::= x\nx ::= \"a\" y\ny ::= x (\"\" | \"\") | \"b\"", "can be empty 2 ways", 0},
		// Found by FuzzRawGrammar: each + copies the repeated sequence,
		// and the stacks after a character double with each level.
		{"repetitions nested 20 deep", "root::=[mmmmm]+++++++++++++++++++*", "limit on grammar ambiguity", 0},
		{"repetitions nested 9 deep at a group's end", `root ::= ((((((((("a" "b"?)+ "c"?)+)+)+)+)+)+)+)+ "d"`, "limit on grammar ambiguity", 0},
		{"repetitions nested 8 deep", "root ::= [a-z]+++++++{0,3}", "", 0},
		{"repetitions nested in sequence", `root ::= ("[" ("a"+ ("," "b"+)*)? "]")+`, "", 2},
		// Found by FuzzRawGrammar: llama.cpp writes [] as nothing, so
		// the star repeated an empty body and its init overflowed the
		// C stack.
		{"star of empty classes", "root::=(([])[])*", "repeats without bound", 0},
		{"quantified empty class", `root ::= "a" []?`, "expecting an item", 0},
		{"empty class", `root ::= "a" [] [^] "b"`, "", 2},
		{"recursion followed by one empty way", "root ::= x\nx ::= \"a\" x \"b\"? | \"\"", "", 0},
		{"recursion followed by a required item", "root ::= x\nx ::= \"a\" x (\"b\"?)? \"c\" | \"\"", "", 0},
		// Found by FuzzSchemaGrammar (the pattern ^((|){,100}$): every
		// repeat can match the empty text two ways, and llama.cpp's
		// advance walks all 2^101 of them.
		{"repeated group with two empty branches", `root ::= "x" ((|){0,100}) "y"`, "limit on grammar ambiguity", 0},
		{"a sequence of groups with two empty branches", `root ::= ` + strings.Repeat(`("" | "") `, 9) + `"a"`, "limit on grammar ambiguity", 0},
		// Found by FuzzSchemaGrammar (the pattern ^a(|){,100}$): the
		// repeat follows a required item in the same sequence.
		{"repeated group with two empty branches after an item", `root ::= "a" x{0,100} "b"` + "\nx ::= (|)", "limit on grammar ambiguity", 0},
		{"repeated group with one empty branch", `root ::= ("a" | ""){0,5} "b"`, "", 1},
		// Found by FuzzRawGrammar (its root was x): a rule that requires
		// itself without end escapes the measures, which assume finite
		// rules; 17 s for eight characters under a root that can finish.
		{"a rule with no finite text under a finite root", "root::=\"b\"|x\nx::=.x*???????????????x*?????????????x*?????x", "accepts no finite text", 0},
		// Found by FuzzRawGrammar: after ".", each nested optional x*
		// can take the next "." and push a frame, so llama.cpp's stacks
		// double with each level (23 s for eight characters; x . x* x*
		// root 75 ms for twelve, and four times that per character).
		{"two recursive references that can start alike", "root::=\"b\"|x\nx::=.x*???????????????x*?????????????x*??root", "two references that start with the same character", 0},
		{"two recursive stars", "root ::= \"b\" | x\nx ::= \".\" x* x* root", "two references", 0},
		{"two optional recursive groups", "root ::= x\nx ::= \".\" (x \",\")? (x \";\")? \"b\"", "two references", 0},
		{"two alternatives recursing alike", "root ::= x\nx ::= \".\" y | \"b\"\ny ::= x \",\" | x \";\"", "two references", 0},
		// One pushing reference and one in the last place: llama.cpp
		// replaces the frame for the last, and the stacks grow with the
		// depth only (12 us a character at 4 characters, 16 at 12).
		{"one recursive star and a reference in the last place", "root ::= \"b\" | x\nx ::= \".\" x* root", "", 1},
		// Optional recursive properties start with their names.
		{"recursive object with optional properties", "root ::= n\nn ::= \"{\" a? b? \"}\"\na ::= \"\\\"left\\\":\" n \",\"\nb ::= \"\\\"right\\\":\" n \",\"", "", 2},
		// The first characters of escaped literals are read as llama.cpp
		// reads them: \x41 is "A".
		{"recursive references starting with one character, once escaped", "root ::= x\nx ::= \"(\" a? b? \")\" | \"z\"\na ::= \"\\x41\" x\nb ::= \"A\" x", "two references", 0},
		{"recursive references starting with an escaped and another character", "root ::= x\nx ::= \"(\" a? b? \")\" | \"z\"\na ::= \"\\x41\" x\nb ::= \"B\" x", "", 1},
		{"recursive alternatives told apart by their literals", "root ::= x\nx ::= \"(\" y | \"b\"\ny ::= a \")\" | c \")\"\na ::= \"if\" x\nc ::= \"int\" x \"!\"", "", 1},
		{"recursive alternatives that start with one literal", "root ::= x\nx ::= \"(\" y | \"b\"\ny ::= a \")\" | c \")\"\na ::= \"in\" x\nc ::= \"in\" x \"!\"", "two references", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			short, err := checkGrammar(tc.grammar)
			if tc.refuse != "" {
				if !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("err %v, want invalid naming %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if short != tc.shortest {
				t.Errorf("shortest %d, want %d", short, tc.shortest)
			}
			if short >= 0 {
				asciiGrammar(t, tc.grammar)
			}
		})
	}
}

// chain is a grammar of n rules, each starting with the next.
func chain(n int) string {
	var b strings.Builder
	b.WriteString("root ::= r0\n")
	for i := range n {
		fmt.Fprintf(&b, "r%d ::= r%d \"a\"\n", i, i+1)
	}
	fmt.Fprintf(&b, "r%d ::= \"a\"\n", n)
	return b.String()
}

// TestRawGrammarMustFinish: a client's grammar whose root requires itself
// without end is refused (an output format's is refused by checkBudget).
func TestRawGrammarMustFinish(t *testing.T) {
	for _, g := range []string{`root ::= "(" root ")"`, "root::=x\nx::=.x*???????????????x*?????????????x*?????x"} {
		if err := checkRawGrammar(g); !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), "no finite text") {
			t.Errorf("%q: err %v, want invalid naming no finite text", g, err)
		}
	}
	if err := checkRawGrammar(`root ::= "(" root ")" | "x"`); err != nil {
		t.Errorf("a recursion that can finish: %v", err)
	}
}
