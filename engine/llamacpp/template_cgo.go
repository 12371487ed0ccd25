package llamacpp

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// Declared here rather than included: the binding's include directory lives
// in the module cache. These are llama.h's declarations at the pinned
// version; the symbols link from the binding's own llama.cpp sources.
struct llama_chat_message_kv { const char * role; const char * content; };
int32_t llama_chat_apply_template(const char * tmpl, const struct llama_chat_message_kv * chat, size_t n_msg, bool add_ass, char * buf, int32_t length);
*/
import "C"

import (
	"errors"
	"unsafe"

	"kvwin/engine"
)

// errTemplateUnsupported: llama.cpp does not know the model's chat template.
var errTemplateUnsupported = errors.New("chat template not supported by llama.cpp")

// applyTemplate renders messages with llama.cpp's built-in template matcher
// (llama_chat_apply_template: it recognises the common templates by their
// text; it does not run Jinja) and appends the assistant generation prompt.
func applyTemplate(tmpl string, msgs []engine.Message) (string, error) {
	ctmpl := C.CString(tmpl)
	defer C.free(unsafe.Pointer(ctmpl))
	n := len(msgs)
	chat := (*[1 << 20]C.struct_llama_chat_message_kv)(C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(C.struct_llama_chat_message_kv{}))))[:n:n]
	defer C.free(unsafe.Pointer(&chat[:1][0]))
	size := 0
	for i, m := range msgs {
		chat[i].role = C.CString(m.Role)
		chat[i].content = C.CString(m.Content)
		size += len(m.Role) + len(m.Content)
	}
	defer func() {
		for i := range chat {
			C.free(unsafe.Pointer(chat[i].role))
			C.free(unsafe.Pointer(chat[i].content))
		}
	}()
	var chatPtr *C.struct_llama_chat_message_kv
	if n > 0 {
		chatPtr = &chat[0]
	}
	buf := make([]byte, 2*size+1024)
	for {
		got := C.llama_chat_apply_template(ctmpl, chatPtr, C.size_t(n), C.bool(true), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)))
		if got < 0 {
			return "", errTemplateUnsupported
		}
		if int(got) <= len(buf) {
			return string(buf[:got]), nil
		}
		buf = make([]byte, int(got))
	}
}
