package llamacpp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"kvwin/engine"
)

// A JSON schema is read in Go before llama.cpp's converter sees it: its
// limits checked (limits.go), in one pass over the text, and two things
// the converter gets wrong rewritten:
//
//   - a root $ref: the converter resolves no reference beside one, so a
//     root $ref to a $ref met an unresolved reference and the output was an
//     object where the schema asked for a string. The root is replaced by
//     what its chain of references ends at (keeping its $defs).
//   - a large enum: the converter writes one alternative per value, and
//     llama.cpp keeps one parse stack per alternative, deduplicated in
//     quadratic time (an enum of 100,000 values took 22 s to initialise and
//     33 s per character). Each enum of more than enumTrieMin values is
//     written by kvwin as a prefix tree instead, one alternative per
//     distinct next character.
//
// The schema is kept in its key order: the converter writes properties in
// the order the schema lists them.

// enumTrieMin is the size from which an enum is written as a prefix tree.
const enumTrieMin = 16

// jv is a JSON value in its key order.
type jv struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys []string
	vals []*jv
	str  string // a string's value; a number's or a literal's text
}

func (v *jv) get(key string) *jv {
	if v == nil || v.kind != 'o' {
		return nil
	}
	// The last of duplicate keys, as llama.cpp's converter (nlohmann's
	// parser) reads them, so every check sees what the converter gets.
	for i := len(v.keys) - 1; i >= 0; i-- {
		if v.keys[i] == key {
			return v.vals[i]
		}
	}
	return nil
}

// readJSON reads one JSON value, its nesting at most maxSchemaDepth.
func readJSON(data []byte) (*jv, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := readValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, engine.Invalid("the JSON schema is not one JSON value")
	}
	return v, nil
}

var errSchemaDepth = engine.Invalid("the JSON schema nests more than %d levels deep (the limit on schema depth)", maxSchemaDepth)

func readValue(d *json.Decoder, depth int) (*jv, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, engine.Invalid("the JSON schema is not valid JSON: %v", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxSchemaDepth {
			return nil, errSchemaDepth
		}
		v := &jv{kind: 'a'}
		if t == '{' {
			v.kind = 'o'
		}
		for d.More() {
			if v.kind == 'o' {
				kt, err := d.Token()
				if err != nil {
					return nil, engine.Invalid("the JSON schema is not valid JSON: %v", err)
				}
				v.keys = append(v.keys, kt.(string))
			}
			c, err := readValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			v.vals = append(v.vals, c)
		}
		if _, err := d.Token(); err != nil {
			return nil, engine.Invalid("the JSON schema is not valid JSON: %v", err)
		}
		return v, nil
	case string:
		return &jv{kind: 's', str: t}, nil
	case json.Number:
		return &jv{kind: 'n', str: t.String()}, nil
	case bool:
		return &jv{kind: 'b', str: strconv.FormatBool(t)}, nil
	default:
		return &jv{kind: 'z', str: "null"}, nil
	}
}

// write renders v compactly, strings escaped as JSON requires only.
func (v *jv) write(b *bytes.Buffer) {
	switch v.kind {
	case 'o', 'a':
		open, close := byte('['), byte(']')
		if v.kind == 'o' {
			open, close = '{', '}'
		}
		b.WriteByte(open)
		for i, c := range v.vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if v.kind == 'o' {
				writeString(b, v.keys[i])
				b.WriteByte(':')
			}
			c.write(b)
		}
		b.WriteByte(close)
	case 's':
		writeString(b, v.str)
	default:
		b.WriteString(v.str)
	}
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// preparedSchema is a checked schema ready for the converter, with the
// prefix trees to put in place of its large enums' placeholders.
type preparedSchema struct {
	text  []byte
	enums map[string][]string // placeholder → the values' JSON texts
}

// prepareSchema checks a schema against the limits and rewrites it for
// the converter (see above).
func prepareSchema(data []byte) (*preparedSchema, error) {
	if len(data) > maxGrammarBytes {
		return nil, engine.Invalid("the JSON schema is %d bytes; the limit on schema size is %d", len(data), maxGrammarBytes)
	}
	root, err := readJSON(data)
	if err != nil {
		return nil, err
	}
	w := &schemaWalk{refs: map[string]bool{}, enums: map[string][]string{}, nonce: nonceFor(data)}
	if err := w.walk(root, "schema"); err != nil {
		return nil, err
	}
	if len(w.refs)*len(data) > maxRefCopyBytes {
		return nil, engine.Invalid("the JSON schema has %d distinct $refs in %d bytes; the converter copies the schema once per reference, and the limit is %d bytes of copies", len(w.refs), len(data), maxRefCopyBytes)
	}
	if root, err = inlineRootRef(root); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	root.write(&b)
	return &preparedSchema{text: b.Bytes(), enums: w.enums}, nil
}

// nonceFor is a placeholder prefix that does not occur in the schema.
func nonceFor(data []byte) string {
	for i := 0; ; i++ {
		p := fmt.Sprintf("kvwin-enum%d-", i)
		if !bytes.Contains(data, []byte(p)) {
			return p
		}
	}
}

type schemaWalk struct {
	refs   map[string]bool
	nrefs  int
	enums  map[string][]string
	nonce  string
	nodes  int
	params int
}

// countKeywords are the repetition counts the converter expands.
var countKeywords = []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}

func (w *schemaWalk) walk(v *jv, at string) error {
	switch v.kind {
	case 'a':
		for i, c := range v.vals {
			if err := w.walk(c, at); err != nil {
				return err
			}
			_ = i
		}
	case 'o':
		if ref := v.get("$ref"); ref != nil && ref.kind == 's' {
			w.nrefs++
			if w.nrefs > maxSchemaRefs {
				return engine.Invalid("the JSON schema has more than %d $refs (the limit on $ref expansion)", maxSchemaRefs)
			}
			w.refs[ref.str] = true
		}
		for _, k := range countKeywords {
			c := v.get(k)
			if c == nil || c.kind != 'n' {
				continue
			}
			n, err := strconv.ParseFloat(c.str, 64)
			if err != nil || n < 0 || n != float64(int64(n)) {
				return engine.Invalid("%s is %s; it must be a non-negative integer", k, c.str)
			}
			if n > maxRepeat {
				return engine.Invalid("%s is %s; the limit on repetition counts is %d", k, c.str, maxRepeat)
			}
		}
		if err := checkEnforceable(v); err != nil {
			return err
		}
		if p := v.get("pattern"); p != nil && p.kind == 's' {
			if err := checkPattern(p.str); err != nil {
				return err
			}
		}
		if e := v.get("enum"); e != nil && e.kind == 'a' && len(e.vals) > enumTrieMin && v.get("const") == nil && v.get("$ref") == nil &&
			v.get("oneOf") == nil && v.get("anyOf") == nil && (v.get("type") == nil || v.get("type").kind != 'a') {
			texts := make([]string, len(e.vals))
			var b bytes.Buffer
			for i, c := range e.vals {
				b.Reset()
				c.write(&b)
				texts[i] = b.String()
			}
			name := w.nonce + strconv.Itoa(len(w.enums))
			w.enums[name] = texts
			*e = jv{kind: 'a', vals: []*jv{{kind: 's', str: name}}}
		}
		for i, k := range v.keys {
			switch k {
			case "enum", "const", "default", "examples":
				continue // values, not schemas
			}
			if err := w.walk(v.vals[i], at); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEnforceable refuses bounds llama.cpp's converter drops without a
// word: the output would not validate. It enforces minimum and maximum on
// integers only, never minProperties or maxProperties, and no item count
// on a tuple (prefixItems, or items as an array).
func checkEnforceable(v *jv) error {
	isNum := func(k string) bool { c := v.get(k); return c != nil && c.kind == 'n' }
	integer := func() bool {
		t := v.get("type")
		if t == nil {
			return false
		}
		if t.kind == 's' {
			return t.str == "integer"
		}
		if t.kind != 'a' {
			return false
		}
		for _, x := range t.vals {
			if x.kind != 's' || (x.str != "integer" && x.str != "null") {
				return false
			}
		}
		return true
	}
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if isNum(k) && !integer() {
			return engine.Invalid("the JSON schema bounds a non-integer with %q, which kvwin's grammar-constrained decoding cannot enforce (only on \"type\": \"integer\")", k)
		}
	}
	for _, k := range []string{"minProperties", "maxProperties"} {
		if isNum(k) {
			return engine.Invalid("the JSON schema uses %q, which kvwin's grammar-constrained decoding cannot enforce", k)
		}
	}
	tuple := v.get("prefixItems") != nil || (v.get("items") != nil && v.get("items").kind == 'a')
	for _, k := range []string{"minItems", "maxItems"} {
		if tuple && isNum(k) {
			return engine.Invalid("the JSON schema bounds a tuple (prefixItems) with %q, which kvwin's grammar-constrained decoding cannot enforce", k)
		}
	}
	return nil
}

// checkPattern bounds a pattern's size, group nesting and quantifier
// counts; the converter recurses once per group and writes each {m,n} for
// llama.cpp to expand.
func checkPattern(p string) error {
	if len(p) > maxPatternBytes {
		return engine.Invalid("a pattern is %d bytes; the limit on pattern size is %d", len(p), maxPatternBytes)
	}
	depth := 0
	atom := false // something precedes that a quantifier may repeat
	for i := 0; i < len(p); i++ {
		c := p[i]
		if (c == '*' || c == '+' || c == '?' || c == '{') && !atom {
			// The converter crashes on a quantifier with nothing to
			// repeat (^*a, a**, (|+)).
			return engine.Invalid("a pattern has a quantifier %q with nothing to repeat at byte %d", c, i)
		}
		atom = !(c == '(' || c == '|' || c == '^' || c == '*' || c == '+' || c == '?' || c == '{')
		switch c {
		case '\\':
			i++
		case '[':
			at := i
			for i++; i < len(p) && p[i] != ']'; i++ {
				if p[i] == '\\' {
					i++
				}
			}
			if i >= len(p) {
				return engine.Invalid("a pattern's character class at byte %d is not closed", at)
			}
		case '(':
			if strings.HasPrefix(p[i+1:], "?") {
				// (?:…), lookarounds: the converter crashes on them.
				return engine.Invalid("a pattern's (?…) group at byte %d is not supported by the grammar converter; use a plain group", i)
			}
			depth++
			if depth > maxGrammarNesting {
				return engine.Invalid("a pattern nests groups more than %d deep (the limit on grammar nesting)", maxGrammarNesting)
			}
		case ')':
			depth--
		case '{':
			j := i + 1
			for j < len(p) && (p[j] >= '0' && p[j] <= '9' || p[j] == ',' || p[j] == ' ') {
				j++
			}
			counts := p[i+1 : min(j, len(p))]
			if j >= len(p) || p[j] != '}' || strings.Count(counts, ",") > 1 || strings.Trim(counts, ", ") == "" {
				// The converter reads every { as a quantifier; one that
				// is not {m}, {m,} or {m,n} becomes a repetition without
				// bound it never finishes writing.
				return engine.Invalid("a pattern has a { at byte %d that starts no {m}, {m,} or {m,n} quantifier; escape a literal brace as \\{", i)
			}
			{
				for _, f := range strings.Split(counts, ",") {
					f = strings.TrimSpace(f)
					if f == "" {
						continue
					}
					if n, err := strconv.Atoi(f); err != nil || n > maxRepeat {
						return engine.Invalid("a pattern repeats {%s}; the limit on repetition counts is %d", p[i+1:j], maxRepeat)
					}
				}
				i = j // past the quantifier's }
			}
		case ']':
			// As for }: the converter loops on a ] that closes no class.
			return engine.Invalid("a pattern has a ] that closes no character class at byte %d; escape a literal bracket as \\]", i)
		case '}':
			// llama.cpp's converter never returns on a } that closes no
			// {m,n} (it loops): a literal brace must be escaped.
			return engine.Invalid("a pattern has a } that closes no {m,n} quantifier at byte %d; escape a literal brace as \\}", i)
		}
	}
	return nil
}

// inlineRootRef replaces a root $ref by the schema its chain of
// references ends at, keeping the root's other members ($defs) where the
// target has none of that name.
func inlineRootRef(root *jv) (*jv, error) {
	ref := root.get("$ref")
	if ref == nil || ref.kind != 's' || !strings.HasPrefix(ref.str, "#/") {
		return root, nil
	}
	seen := map[string]bool{}
	target := root
	for target.get("$ref") != nil && target.get("$ref").kind == 's' {
		r := target.get("$ref").str
		if !strings.HasPrefix(r, "#/") {
			return root, nil // the converter reports it
		}
		if seen[r] {
			return nil, engine.Invalid("the JSON schema's root $ref %q is a cycle of references with no schema", ref.str)
		}
		seen[r] = true
		next := root
		for _, sel := range strings.Split(r[2:], "/") {
			if next = next.get(sel); next == nil {
				return nil, engine.Invalid("the JSON schema's $ref %q does not resolve", r)
			}
		}
		target = next
	}
	if target.kind != 'o' {
		return root, nil
	}
	out := &jv{kind: 'o', keys: append([]string(nil), target.keys...), vals: append([]*jv(nil), target.vals...)}
	for i, k := range root.keys {
		if k != "$ref" && out.get(k) == nil {
			out.keys, out.vals = append(out.keys, k), append(out.vals, root.vals[i])
		}
	}
	return out, nil
}

// placeEnums puts each enum's prefix tree in place of its placeholder in
// the converter's grammar.
func placeEnums(grammar string, enums map[string][]string) (string, error) {
	if len(enums) == 0 {
		return grammar, nil
	}
	var rules strings.Builder
	names := make([]string, 0, len(enums))
	for n := range enums {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		lit := gbnfLiteral(`"` + name + `"`)
		if !strings.Contains(grammar, lit) {
			return "", errors.New("llamacpp: an enum placeholder is missing from the converter's output")
		}
		grammar = strings.ReplaceAll(grammar, lit, name)
		writeTrie(&rules, name, enums[name])
	}
	return grammar + "\n" + rules.String(), nil
}

// writeTrie writes rules matching exactly the given texts, as a prefix
// tree: one rule per branching point, each with one alternative per
// distinct next character.
func writeTrie(b *strings.Builder, name string, texts []string) {
	sorted := append([]string(nil), texts...)
	sort.Strings(sorted)
	uniq := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			uniq = append(uniq, s)
		}
	}
	t := &trieWriter{b: b, name: name, texts: uniq}
	t.node(name, 0, len(uniq), 0)
}

type trieWriter struct {
	b     *strings.Builder
	name  string
	texts []string
	next  int
}

// node writes rule `rule` matching texts[lo:hi] from byte d on.
func (t *trieWriter) node(rule string, lo, hi, d int) {
	var alts []string
	type child struct {
		rule       string
		lo, hi, at int
	}
	var children []child
	if len(t.texts[lo]) == d {
		alts = append(alts, `""`)
		lo++
	}
	for g := lo; g < hi; {
		r, _ := utf8.DecodeRuneInString(t.texts[g][d:])
		e := g + 1
		for e < hi {
			if r2, _ := utf8.DecodeRuneInString(t.texts[e][d:]); r2 != r {
				break
			}
			e++
		}
		first, last := t.texts[g], t.texts[e-1]
		l := d
		for l < len(first) && l < len(last) && first[l] == last[l] {
			l++
		}
		for l < len(first) && !utf8.RuneStart(first[l]) {
			l--
		}
		alt := gbnfLiteral(first[d:l])
		if !(e-g == 1 && l == len(first)) {
			t.next++
			c := child{rule: fmt.Sprintf("%s-%d", t.name, t.next), lo: g, hi: e, at: l}
			children = append(children, c)
			alt += " " + c.rule
		}
		alts = append(alts, alt)
		g = e
	}
	fmt.Fprintf(t.b, "%s ::= %s\n", rule, strings.Join(alts, " | "))
	for _, c := range children {
		t.node(c.rule, c.lo, c.hi, c.at)
	}
}

// gbnfLiteral quotes s as a GBNF string literal.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
