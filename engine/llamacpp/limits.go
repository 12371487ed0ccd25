package llamacpp

import "time"

// Limits on constrained decoding, checked in Go before llama.cpp sees a
// grammar or a schema (gbnf.go, schema.go). Each is set so that schemas of
// ordinary size (hundreds of properties, nesting 64 to 100 deep, enums of
// 100,000 values, patterns such as ^[a-z]{3,8}$) are accepted and enforced
// exactly, and far below the sizes at which llama.cpp's recursive parsers
// overflow the C stack (tens of thousands of levels) or its expansion of
// repetitions takes gigabytes (a count of 10^6). Each rejection is a 400
// naming the limit.
const (
	// maxGrammarBytes bounds a grammar (the raw grammar field, or the
	// converter's output) and a schema: twice the largest grammar of an
	// ordinary schema (an enum of 100,000 words, about 1.9 MB as the
	// converter writes it).
	maxGrammarBytes = 4 << 20
	// maxGrammarNesting bounds parenthesised groups inside one rule, and
	// groups inside a pattern: the converter writes one level per group of
	// a pattern and a few per schema level, so 256 is over twice what an
	// ordinary schema of depth 100 needs; llama.cpp's parser recurses
	// once per level.
	maxGrammarNesting = 256
	// maxGrammarDepth bounds how deep llama.cpp's stack advance recurses
	// entering a rule (through rules that start a rule or can be empty):
	// 2,048 frames of a few hundred bytes each stay far inside a thread's
	// C stack; an object of 1,000 optional properties needs about 1,000.
	maxGrammarDepth = 2048
	// maxGrammarWidth bounds how many parse stacks llama.cpp can keep at
	// once (it deduplicates them in quadratic time on every character, and
	// checks each candidate token against each): an alternation of that
	// many branches, or a repeated item that can be empty multiplying the
	// positions of its inner repetitions. Measured on one thread, a token
	// of a grammar 256 wide costs about 5 ms of grammar work, 512 wide
	// 17 ms, 1,000 wide 120 ms (every other slot waits for it); 256 keeps
	// one token's grammar work near a decode's. It admits objects of up to
	// about 250 optional properties (required ones cost no width) and
	// enums of any size (kvwin writes them as a prefix tree, schema.go).
	maxGrammarWidth = 256
	// maxGrammarElements bounds the grammar after llama.cpp expands its
	// repetitions (each element 8 bytes, plus a rule per optional repeat):
	// about 100 MB at most.
	maxGrammarElements = 1 << 20
	// maxRepeat bounds every repetition count: {m,n} in a grammar or a
	// pattern, minLength/maxLength, minItems/maxItems. Ten times the
	// largest bound of ordinary schemas (a 1,000-character text field);
	// above it a bound cannot be reached within an ordinary answer, and
	// its expansion costs about a kilobyte per unit in llama.cpp.
	maxRepeat = 10000
	// maxSchemaDepth bounds the JSON nesting of a schema: an array schema
	// 100 deep is 101 levels, an object schema 100 deep through properties
	// 201; the converter recurses once per level.
	maxSchemaDepth = 512
	// maxSchemaRefs bounds the $ref occurrences of a schema; each distinct
	// one also costs the converter a copy of the whole schema, so their
	// number times the schema's size is bounded by maxRefCopyBytes.
	maxSchemaRefs   = 4096
	maxRefCopyBytes = 64 << 20
	// maxPatternBytes bounds one pattern.
	maxPatternBytes = 64 << 10
)

// maxTokenGrammarWork bounds the grammar work one token of a constrained
// task does on the engine loop (the sampler's grammar and the budget
// keeper's checks; closes are computed off the loop). The limits above
// keep it to milliseconds; a grammar that still takes longer is ended
// rather than let slow every other slot. A quarter second is about fifty
// times an ordinary constrained token on one thread.
const maxTokenGrammarWork = 250 * time.Millisecond
