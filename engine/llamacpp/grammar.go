package llamacpp

import (
	"regexp"
	"strconv"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// anyObject is the schema of json_object output: any JSON object.
const anyObject = `{"type": "object"}`

// rootRule finds the root rule of a converted schema, to rename it.
var rootRule = regexp.MustCompile(`(?m)^root ::=`)

// spaceRule is the converter's optional whitespace between tokens. kvwin
// writes JSON compact: whitespace is not sampled, so keys and punctuation
// are the only continuation and are inserted (constrain.go).
var spaceRule = regexp.MustCompile(`(?m)^space ::= .*$`)

// outputGrammar turns an output constraint into a GBNF grammar: the
// pinned binding's JSON Schema converter (llama.cpp's) for the value, with
// the fixed prefix and suffix around it as literals.
func outputGrammar(o *engine.Output) (string, error) {
	schema := o.Schema
	if len(schema) == 0 {
		schema = []byte(anyObject)
	}
	g := llama.SchemaToGrammar(schema)
	if g == nil {
		return "", engine.Invalid("the JSON schema could not be turned into a grammar (llama.cpp's converter rejected it)")
	}
	body := rootRule.ReplaceAllString(string(g), "json-value ::=")
	body = spaceRule.ReplaceAllString(body, `space ::= ""`)
	root := "root ::= "
	if o.Prefix != "" {
		root += strconv.Quote(o.Prefix) + " "
	}
	root += "json-value"
	if o.Suffix != "" {
		root += " " + strconv.Quote(o.Suffix)
	}
	return root + "\n" + body, nil
}
