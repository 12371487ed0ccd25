package llamacpp

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llama_context;
struct llama_model;
struct llama_vocab;
void llama_free(struct llama_context * ctx);
const struct llama_vocab * llama_model_get_vocab(const struct llama_model * model);
int32_t llama_token_to_piece(const struct llama_vocab * vocab, int32_t token, char * buf, int32_t length, int32_t lstrip, bool special);
*/
import "C"

import (
	"errors"
	"reflect"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

// The pinned binding hides the C context pointer and has no function to free
// a context (Ollama's runner never frees one: its process exits). kvwin's
// engine can be closed and reopened in one process, so it reaches the pointer
// itself. rawContext checks the binding's struct layout first, so a binding
// change fails loudly at start instead of corrupting memory.

var errBindingLayout = errors.New("llamacpp: unexpected layout of llama.Context in the pinned binding")

func checkBindingLayout() error {
	for _, t := range []reflect.Type{reflect.TypeOf(llama.Context{}), reflect.TypeOf(llama.Model{})} {
		if t.NumField() < 1 || t.Field(0).Name != "c" || t.Field(0).Type.Kind() != reflect.Pointer || t.Field(0).Offset != 0 {
			return errBindingLayout
		}
	}
	return nil
}

// pieceTable returns every token's text as generated output shows it:
// control tokens render as nothing (special=false, as llama-server does by
// default), byte tokens as their raw byte. Built once at load, it makes
// detokenizing a table lookup.
func pieceTable(m *llama.Model, n int) []string {
	vocab := C.llama_model_get_vocab(*(**C.struct_llama_model)(unsafe.Pointer(m)))
	out := make([]string, n)
	buf := make([]byte, 256)
	for i := range n {
		got := C.llama_token_to_piece(vocab, C.int32_t(i), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, false)
		if got < 0 {
			big := make([]byte, -got)
			got = C.llama_token_to_piece(vocab, C.int32_t(i), (*C.char)(unsafe.Pointer(&big[0])), C.int32_t(len(big)), 0, false)
			out[i] = string(big[:max(got, 0)])
			continue
		}
		out[i] = string(buf[:got])
	}
	return out
}

func rawContext(c *llama.Context) *C.struct_llama_context {
	return *(**C.struct_llama_context)(unsafe.Pointer(c))
}

// freeContext frees a llama.cpp context created by the binding.
func freeContext(c *llama.Context) {
	C.llama_free(rawContext(c))
}
