package llamacpp

import (
	"regexp"
	"strconv"

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
// the fixed prefix and suffix around it as literals. The schema is checked
// and prepared first (schema.go), the grammar after (gbnf.go); shortest is
// the length in characters of the shortest output the grammar allows, -1
// when it allows no finite one.
func outputGrammar(o *engine.Output) (grammar string, shortest int, err error) {
	schema := o.Schema
	if len(schema) == 0 {
		schema = []byte(anyObject)
	}
	prep, err := prepareSchema(schema)
	if err != nil {
		return "", 0, err
	}
	g, ok, cut := convertSchema(prep.text, maxGrammarBytes)
	switch {
	case cut:
		return "", 0, engine.Invalid("the JSON schema converts to a grammar of more than %d bytes (the limit on grammar size)", maxGrammarBytes)
	case !ok:
		return "", 0, engine.Invalid("the JSON schema could not be turned into a grammar (llama.cpp's converter rejected it)")
	}
	if g, err = placeEnums(g, prep.enums); err != nil {
		return "", 0, err
	}
	body := rootRule.ReplaceAllString(g, "json-value ::=")
	body = spaceRule.ReplaceAllString(body, `space ::= ""`)
	root := "root ::= "
	if o.Prefix != "" {
		root += strconv.Quote(o.Prefix) + " "
	}
	root += "json-value"
	if o.Suffix != "" {
		root += " " + strconv.Quote(o.Suffix)
	}
	grammar = root + "\n" + body
	if shortest, err = checkGrammar(grammar); err != nil {
		return "", 0, err
	}
	return grammar, shortest, nil
}
