package ollama

import (
	"math"
	"strings"
	"sync/atomic"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Ollama renders and tokenizes prompts itself and v0.9.6 has no tokenize
// route, so kvwin never sees the prompt's tokens. It works with text
// instead: a canonical rendering of the request (PromptText), whose bytes
// give the prompt's size and whose prefixes give what Ollama's cache can
// reuse.
//
// The rendering is not Ollama's template, and need not be: what matters is
// that it changes exactly where the conversation changes. Each message is
// a record separator, the role, a unit separator and the content; the
// generation prompt is an empty assistant record, so a prompt followed by
// its answer is, byte for byte, the start of the next turn's prompt, as it
// is in the KV cache Ollama keeps after answering.

// Separators of the canonical rendering: ASCII control characters a chat
// message practically never holds.
const (
	recordSep = "\x1e" // before each message
	unitSep   = "\x1f" // between role and content
	rawMark   = "\x1d" // starts a raw prompt, so it never matches a chat
)

// Token estimates over the rendering. Every token of a byte-level or
// SentencePiece vocabulary spans at least one byte of text, so a text of n
// bytes has at most n tokens, plus what the template adds: role markers
// and the like (ChatML: 2 control tokens and a newline per message; Llama
// 3: 4 or 5), BOS, the generation prompt. The overheads below bound those
// for the templates in common use.
const (
	messageOverhead = 16 // template tokens around one message, at most
	promptOverhead  = 16 // BOS and the generation prompt, at most
	// defaultNumKeep is Ollama's own num_keep default, sent when kvwin has
	// nothing better to say.
	defaultNumKeep = 4
	// minCalibrationBytes is the smallest prompt the tokens-per-byte
	// ratio is learned from: in a shorter one the template's tokens, not
	// the text's, decide the ratio.
	minCalibrationBytes = 1024
)

// PromptText returns kvwin's canonical rendering of req's prompt: each
// message as a record separator (0x1E), its role, a unit separator (0x1F)
// and its content, then an empty assistant record (the generation prompt),
// so that a prompt followed by its answer is the start of the next turn's
// prompt; a text prompt is a group separator (0x1D) and the text. It is
// what a gateway keys approximately (kvcache.Keyer.Text) for this backend,
// and what the backend's own reuse estimate keys. It fails, with
// engine.ErrInvalidRequest, on a request Generate would refuse for its
// form. It does not block.
func PromptText(req engine.Request) (string, error) {
	if err := checkForm(req); err != nil {
		return "", err
	}
	return render(req), nil
}

// PromptText is the package's PromptText: the text a gateway keys for
// this backend (engine.TextRenderer).
func (b *Backend) PromptText(req engine.Request) (string, error) { return PromptText(req) }

// PromptKeys returns the block keys this backend's reuse estimate gives
// req's prompt (its tenant's salt included): a gateway's registry must
// compute the same (tested in package router). It does not block.
func (b *Backend) PromptKeys(req engine.Request) (kvcache.Chain, error) {
	text, err := PromptText(req)
	if err != nil {
		return kvcache.Chain{}, err
	}
	return b.res.chain(req.Tenant, text), nil
}

// render is PromptText for a request checkForm accepted.
func render(req engine.Request) string {
	if len(req.Messages) == 0 {
		return rawMark + req.Prompt
	}
	var b strings.Builder
	// Enough for every message whatever its role: "assistant" is the
	// longest.
	n := len(req.Messages)*(len(recordSep)+len(unitSep)+len(engine.RoleAssistant)) + len(recordSep+unitSep+engine.RoleAssistant)
	for _, m := range req.Messages {
		n += len(m.Content)
	}
	b.Grow(n)
	for _, m := range req.Messages {
		b.WriteString(recordSep)
		b.WriteString(m.Role)
		b.WriteString(unitSep)
		b.WriteString(m.Content)
	}
	b.WriteString(recordSep + engine.RoleAssistant + unitSep)
	return b.String()
}

// upperTokens bounds the tokens of req's prompt, rendered as text, on a
// model whose Modelfile adds system (Ollama puts it first when the request
// has no system message of its own).
func upperTokens(req engine.Request, text, system string) int {
	n := len(text) + promptOverhead + messageOverhead*len(req.Messages)
	if len(req.Messages) > 0 && req.Messages[0].Role != engine.RoleSystem && system != "" {
		n += len(system) + messageOverhead
	}
	return n
}

// systemTokens bounds the tokens of the leading system messages and what
// comes before them: what num_keep protects by default.
func systemTokens(req engine.Request) int {
	n := 0
	for _, m := range req.Messages {
		if m.Role != engine.RoleSystem {
			break
		}
		n += len(recordSep+unitSep) + len(m.Role) + len(m.Content) + messageOverhead
	}
	if n == 0 {
		return 0
	}
	return n + promptOverhead
}

// ratio is a backend's tokens per byte of rendering, learned from the
// prompt_eval_count of its responses. It turns sizes in bytes into likely
// token counts for what Ollama reports only at the end (the first event's
// prompt tokens). Safe for concurrent use.
type ratio struct {
	bits atomic.Uint64 // math.Float64bits; 0 until learned
}

// learn records that a rendering of textBytes bytes was tokens tokens.
func (r *ratio) learn(tokens, textBytes int) {
	if tokens <= 0 || textBytes < minCalibrationBytes {
		return
	}
	r.bits.Store(math.Float64bits(float64(tokens) / float64(textBytes)))
}

// tokens is the likely token count of textBytes bytes of rendering: one
// per byte until a response taught otherwise.
func (r *ratio) tokens(textBytes int) int {
	v := math.Float64frombits(r.bits.Load())
	if v == 0 {
		v = 1
	}
	return int(math.Ceil(float64(textBytes) * v))
}
