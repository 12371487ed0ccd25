package gguf

// The test model's vocabulary is GPT-2's byte-level one without merges: 256
// tokens, one per byte, spelled through GPT-2's byte↔unicode map, plus three
// control tokens. With no merges every byte is one token, so any UTF-8 text
// (and any byte string) tokenizes and detokenizes losslessly, in llama.cpp and
// in both Ollama engines alike.
//
// Its pre-tokenizer is GPT-2's ("gpt-2"), which llama.cpp splits with code of
// its own. Without merges the split cannot change a token, only the time it
// takes: llama.cpp's "default" split runs three of its four expressions
// through std::regex, 113 µs for a short chat message (5 µs with Llama 3's
// vocabulary). That was most of a fully cached turn's window and tokenize
// phases at two messages (bench overhead, side by side: window 0.19 → 0.08
// ms, tokenize 0.07 → 0.01 ms, the same token counts). A real model's
// tokenizer is not that slow, so neither is the test model's.

// Control tokens of the test model, right after the 256 byte tokens.
const (
	TinyTokenEndOfText = 256 + iota // <|endoftext|>: BOS
	TinyTokenIMStart                // <|im_start|>
	TinyTokenIMEnd                  // <|im_end|>: EOS and end of turn
	tinyVocabSize
)

var tinyControlTokens = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// TinyChatTemplate is the test model's chat template: ChatML, which llama.cpp
// and Ollama both recognise.
const TinyChatTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// byteToUnicode is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the others to code points from 256 up, so every token's text is
// printable and distinct.
func byteToUnicode() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// tinyVocab returns the token texts and types (1 normal, 3 control).
func tinyVocab() ([]string, []int32) {
	tokens := make([]string, 0, tinyVocabSize)
	types := make([]int32, 0, tinyVocabSize)
	for _, r := range byteToUnicode() {
		tokens = append(tokens, string(r))
		types = append(types, 1)
	}
	for _, t := range tinyControlTokens {
		tokens = append(tokens, t)
		types = append(types, 3)
	}
	return tokens, types
}
