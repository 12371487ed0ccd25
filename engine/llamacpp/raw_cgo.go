package llamacpp

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llama_context;
struct llama_model;
struct llama_vocab;
void llama_free(struct llama_context * ctx);
size_t llama_state_seq_get_size(struct llama_context * ctx, int32_t seq_id);
size_t llama_state_seq_get_data(struct llama_context * ctx, uint8_t * dst, size_t size, int32_t seq_id);
size_t llama_state_seq_set_data(struct llama_context * ctx, const uint8_t * src, size_t size, int32_t dest_seq_id);
void llama_kv_self_update(struct llama_context * ctx);
int32_t llama_kv_self_used_cells(const struct llama_context * ctx);
const struct llama_vocab * llama_model_get_vocab(const struct llama_model * model);
float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
int32_t llama_token_to_piece(const struct llama_vocab * vocab, int32_t token, char * buf, int32_t length, int32_t lstrip, bool special);
int32_t llama_vocab_bos(const struct llama_vocab * vocab);
int32_t llama_vocab_eos(const struct llama_vocab * vocab);
int llama_vocab_get_attr(const struct llama_vocab * vocab, int32_t token);
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

// seqState copies the KV state of one sequence out of the context
// (llama_state_seq_get_data: the pinned binding does not expose it).
func seqState(c *llama.Context, seq int) []byte {
	ctx := rawContext(c)
	n := C.llama_state_seq_get_size(ctx, C.int32_t(seq))
	if n == 0 {
		return nil
	}
	buf := make([]byte, int(n))
	got := C.llama_state_seq_get_data(ctx, (*C.uint8_t)(unsafe.Pointer(&buf[0])), n, C.int32_t(seq))
	return buf[:int(got)]
}

// setSeqState loads a state saved by seqState into sequence seq, which must
// be empty. It fails (false) when the cache has no contiguous room for it.
func setSeqState(c *llama.Context, seq int, state []byte) bool {
	if len(state) == 0 {
		return false
	}
	got := C.llama_state_seq_set_data(rawContext(c), (*C.uint8_t)(unsafe.Pointer(&state[0])), C.size_t(len(state)), C.int32_t(seq))
	return got > 0
}

// applyKVUpdates applies pending KV cache work (a defragmentation asked for
// with KvCacheDefrag) now rather than at the next decode. It computes a
// graph, so under computeMu (compute.go).
func applyKVUpdates(c *llama.Context) {
	computeMu.Lock()
	defer computeMu.Unlock()
	C.llama_kv_self_update(rawContext(c))
}

// usedCells is the number of KV cells holding at least one sequence.
func usedCells(c *llama.Context) int {
	return int(C.llama_kv_self_used_cells(rawContext(c)))
}

// logitsRow copies the logits of row i of the last decoded batch (a row that
// asked for logits), n of them (the vocabulary size); nil if there are none.
func logitsRow(c *llama.Context, i, n int) []float32 {
	p := C.llama_get_logits_ith(rawContext(c), C.int32_t(i))
	if p == nil {
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), n)...)
}

// specialTexts returns the texts of the model's BOS and EOS tokens as a chat
// template writes them (bos_token, eos_token); "" for a token the model
// lacks.
func specialTexts(m *llama.Model) (bos, eos string) {
	vocab := C.llama_model_get_vocab(*(**C.struct_llama_model)(unsafe.Pointer(m)))
	return specialPiece(m, int(C.llama_vocab_bos(vocab))), specialPiece(m, int(C.llama_vocab_eos(vocab)))
}

// specialPiece is token id's text with control tokens spelled out.
func specialPiece(m *llama.Model, id int) string {
	if id < 0 {
		return ""
	}
	vocab := C.llama_model_get_vocab(*(**C.struct_llama_model)(unsafe.Pointer(m)))
	buf := make([]byte, 256)
	got := C.llama_token_to_piece(vocab, C.int32_t(id), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, true)
	if got < 0 {
		return ""
	}
	return string(buf[:got])
}

// userDefined reports whether token id is a user-defined token: llama.cpp
// matches those in text even when told not to parse special tokens (Gemma's
// <start_of_turn> is one in files from llama.cpp's converter).
func userDefined(m *llama.Model, id int) bool {
	vocab := C.llama_model_get_vocab(*(**C.struct_llama_model)(unsafe.Pointer(m)))
	return C.llama_vocab_get_attr(vocab, C.int32_t(id))&(1<<4) != 0
}

// control reports whether token id is a control token.
func control(m *llama.Model, id int) bool {
	vocab := C.llama_model_get_vocab(*(**C.struct_llama_model)(unsafe.Pointer(m)))
	return C.llama_vocab_get_attr(vocab, C.int32_t(id))&(1<<3) != 0
}
