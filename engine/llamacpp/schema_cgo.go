package llamacpp

/*
#include <stddef.h>
#include <stdlib.h>
int schema_to_grammar(const char *json_schema, char *grammar, size_t max_len);
*/
import "C"

import "unsafe"

// convertSchema runs llama.cpp's JSON Schema converter (the binding's
// schema_to_grammar) with an output buffer of limit+1 bytes. The binding's
// own llama.SchemaToGrammar caps its buffer at min(1 MiB, 4×len(schema)) and
// cuts a longer grammar silently, so valid schemas of moderate size (a deep
// array, a large enum) became a grammar that does not parse. ok is false
// when the converter rejected the schema; cut is true when its output
// exceeds limit bytes (the converter writes at most the buffer's size - 1).
func convertSchema(schema []byte, limit int) (grammar string, ok, cut bool) {
	cs := C.CString(string(schema))
	defer C.free(unsafe.Pointer(cs))
	size := limit + 2 // a grammar of limit+1 bytes fills the buffer: cut
	buf := C.malloc(C.size_t(size))
	defer C.free(buf)
	n := int(C.schema_to_grammar(cs, (*C.char)(buf), C.size_t(size)))
	if n == 0 {
		return "", false, false
	}
	if n > limit {
		return "", true, true
	}
	return C.GoStringN((*C.char)(buf), C.int(n)), true, false
}
