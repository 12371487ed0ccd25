package llamaserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// mergeVocab is a tokenizer that does what makes cutting a text hard:
// llama.cpp's special-token split (longest text first, left to right, with
// lstrip and rstrip), then a greedy longest match over plain pieces that
// span what a naive cut would treat as boundaries ("\n\nhel" spans a
// template's "\n\n" and a message's "hello"), some of them halves of a
// UTF-8 character (pieces then come as byte arrays, as llama-server sends
// them).
type mergeVocab struct {
	specials []fakeSpecial // longest text first
	plain    []string      // ids 1000+i, longest first when matching
	byText   map[string]int
	texts    map[int]string
	// spacePrefix adds a space before the text and after every special
	// token, as SPM vocabularies with add_space_prefix do.
	spacePrefix bool
	// escapedSpaces gives the pieces of whitespace runs as "▁▁", as
	// Gemma's user-defined whitespace tokens come.
	escapedSpaces bool
}

// fakeSpecial is a special token: control (split only with parse_special)
// or user-defined (always split), stripping whitespace beside it or not.
type fakeSpecial struct {
	text           string
	id             int
	control        bool
	lstrip, rstrip bool
}

func newMergeVocab() *mergeVocab {
	v := &mergeVocab{specials: []fakeSpecial{
		{text: "<|begin_of_text|>", id: 1, control: true},
		{text: "<|start_header_id|>", id: 4, control: true},
		{text: "<|end_header_id|>", id: 5, control: true},
		{text: "<|eot_id|>", id: 6, control: true},
		{text: "[INST]", id: 7, control: true},
		{text: "[/INST]", id: 8, control: true},
		{text: "<|r|>", id: 9, control: true, rstrip: true},
		{text: "<|l|>", id: 10, control: true, lstrip: true},
		{text: "<tool>", id: 11}, // user-defined
		// Starts inside <|end_header_id|> and is longer, so it wins: a cut
		// there must notice.
		{text: "_id|>\n\nSTOP STOP STOP", id: 12, control: true},
	}, byText: map[string]int{}, texts: map[int]string{}}
	v.plain = []string{"\n\n", "\n\nhel", "\n\nH", "lo\n", "o\n", "  ", "   ", "hel", "hello", "lo", " wor",
		"ld", ".\n", "\xf0\x9f", "\x98\x80", "\xf0\x9f\x98", "é", "<|", "|>", "id|>", "_id", "[/", "ab", "bab",
		"}\n", "\t}", "eot", "STOP", "\n\nSTO", "user", "assistant", "system", "  \n", " \n\n"}
	slices.SortStableFunc(v.specials, func(a, b fakeSpecial) int { return len(b.text) - len(a.text) })
	for _, s := range v.specials {
		v.texts[s.id] = s.text
	}
	for i, p := range v.plain {
		v.byText[p], v.texts[1000+i] = 1000+i, p
	}
	for c := range 256 {
		v.texts[100+c] = string([]byte{byte(c)})
	}
	return v
}

// piece is a fragment of the text being split: raw text, or a token.
type piece struct {
	text string
	tok  int // 0: raw text
}

// encode tokenizes s as llama.cpp would with this vocabulary.
func (v *mergeVocab) encode(s string, addSpecial, parseSpecial bool) []int {
	out := []int{}
	if addSpecial {
		out = append(out, 1)
	}
	frags := []piece{{text: s}}
	for _, sp := range v.specials {
		if sp.control && !parseSpecial {
			continue
		}
		var next []piece
		for _, f := range frags {
			if f.tok != 0 {
				next = append(next, f)
				continue
			}
			next = split(next, f.text, sp)
		}
		frags = next
	}
	afterSpecial := true
	for _, f := range frags {
		if f.tok != 0 {
			out = append(out, f.tok)
			afterSpecial = true
			continue
		}
		if v.spacePrefix && afterSpecial {
			f.text = " " + f.text
		}
		out = v.plainTokens(out, f.text)
		afterSpecial = false
	}
	return out
}

// split appends the fragments of raw text around every occurrence of sp.
func split(dst []piece, rest string, sp fakeSpecial) []piece {
	const space = " \t\n\v\f\r"
	for rest != "" {
		i := strings.Index(rest, sp.text)
		if i < 0 {
			return append(dst, piece{text: rest})
		}
		left := rest[:i]
		if sp.lstrip {
			left = strings.TrimRight(left, space)
		}
		if left != "" {
			dst = append(dst, piece{text: left})
		}
		dst = append(dst, piece{tok: sp.id})
		rest = rest[i+len(sp.text):]
		if sp.rstrip {
			rest = strings.TrimLeft(rest, space)
		}
	}
	return dst
}

// plainTokens is the greedy longest match of s.
func (v *mergeVocab) plainTokens(dst []int, s string) []int {
	for s != "" {
		best, id := 1, 100+int(s[0])
		for _, p := range v.plain {
			if len(p) > best && strings.HasPrefix(s, p) {
				best, id = len(p), v.byText[p]
			}
		}
		dst = append(dst, id)
		s = s[best:]
	}
	return dst
}

// pieceJSON is what llama-server sends as a token's piece.
func (v *mergeVocab) pieceJSON(id int) any {
	text := v.texts[id]
	if v.escapedSpaces && id >= 1000 && strings.Trim(text, " ") == "" {
		return strings.ReplaceAll(text, " ", "\u2581")
	}
	if utf8.ValidString(text) {
		return text
	}
	b := make([]int, len(text))
	for i := range len(text) {
		b[i] = int(text[i])
	}
	return b
}

// vocabServer is a llama-server with a mergeVocab and a template given as
// a Go function. It records every /tokenize request.
type vocabServer struct {
	v        *mergeVocab
	template func([]struct{ Role, Content string }) string
	pieces   bool // answer with_pieces (an old server may not)
	// alwaysParse parses control tokens whatever parse_special says, as
	// the June 2025 build does.
	alwaysParse bool

	mu        sync.Mutex
	tokenizes []tokenizeRequest
	bodyBytes int
	srv       *httptest.Server
}

func startVocabServer(t *testing.T, tmpl func([]struct{ Role, Content string }) string) *vocabServer {
	t.Helper()
	s := &vocabServer{v: newMergeVocab(), template: tmpl, pieces: true}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *vocabServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.Method + " " + r.URL.Path {
	case "GET /props":
		serveFile(w, http.StatusOK, "props_llama3.json")
	case "POST /apply-template":
		var in struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		writeJSON(w, http.StatusOK, map[string]string{"prompt": s.template(in.Messages)})
	case "POST /tokenize":
		var in tokenizeRequest
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.tokenizes = append(s.tokenizes, in)
		s.bodyBytes += len(body)
		s.mu.Unlock()
		ids := s.v.encode(in.Content, in.AddSpecial, in.ParseSpecial || s.alwaysParse)
		if !in.WithPieces || !s.pieces {
			writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
			return
		}
		out := make([]map[string]any, len(ids))
		for i, id := range ids {
			out[i] = map[string]any{"id": id, "piece": s.v.pieceJSON(id)}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
	case "POST /detokenize":
		var in struct {
			Tokens []int `json:"tokens"`
		}
		_ = json.Unmarshal(body, &in)
		var b strings.Builder
		for _, id := range in.Tokens {
			b.WriteString(s.v.texts[id])
		}
		writeJSON(w, http.StatusOK, map[string]string{"content": b.String()})
	default:
		http.NotFound(w, r)
	}
}

// sent returns the /tokenize requests so far and the bytes of their bodies.
func (s *vocabServer) sent() ([]tokenizeRequest, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokenizes), s.bodyBytes
}

// The templates the tests render with.
var vocabTemplates = map[string]func([]struct{ Role, Content string }) string{
	"llama3": llama3,
	// [INST] … [/INST] answer<|eot_id|>: the text ends at a control token.
	"inst": func(msgs []struct{ Role, Content string }) string {
		var b strings.Builder
		b.WriteString("<|begin_of_text|>")
		for _, m := range msgs {
			if m.Role == "assistant" {
				b.WriteString(" " + m.Content + "<|eot_id|>")
				continue
			}
			b.WriteString("[INST] " + m.Content + " [/INST]")
		}
		return b.String()
	},
	// Control tokens that strip the whitespace beside them.
	"strip": func(msgs []struct{ Role, Content string }) string {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString("<|r|>  " + m.Role + "\n" + m.Content + "  <|l|>")
		}
		return b.String() + "<|r|> assistant\n"
	},
	// Rewrites the start when a message is added (a count in the header).
	"count": func(msgs []struct{ Role, Content string }) string {
		return "<|begin_of_text|>" + strings.Repeat("#", len(msgs)) + "<|eot_id|>" + llama3(msgs)[len("<|begin_of_text|>"):]
	},
	// Moves the system prompt before the last user message, as Mistral's
	// newer templates do: earlier text changes when a message is added.
	"lastsys": func(msgs []struct{ Role, Content string }) string {
		var sys string
		var rest []struct{ Role, Content string }
		for _, m := range msgs {
			if m.Role == "system" {
				sys = m.Content
				continue
			}
			rest = append(rest, m)
		}
		var b strings.Builder
		b.WriteString("<|begin_of_text|>")
		for i, m := range rest {
			if m.Role == "assistant" {
				b.WriteString(m.Content + "<|eot_id|>")
				continue
			}
			if i == len(rest)-1 && sys != "" {
				b.WriteString("[INST] " + sys + "\n\n" + m.Content + " [/INST]")
				continue
			}
			b.WriteString("[INST] " + m.Content + " [/INST]")
		}
		return b.String()
	},
	// No control token but BOS at the start: never a cut.
	"plain": func(msgs []struct{ Role, Content string }) string {
		var b strings.Builder
		b.WriteString("<|begin_of_text|>")
		for _, m := range msgs {
			b.WriteString(m.Role + ": " + m.Content + "\n\n")
		}
		return b.String() + "assistant: "
	},
}

// The vocabulary must merge across the boundaries a naive cut would take,
// or the tests below would prove nothing.
func TestMergeVocabMergesAcrossMessages(t *testing.T) {
	v := newMergeVocab()
	whole := v.encode("<|end_header_id|>\n\nhello", false, true)
	naive := append(v.encode("<|end_header_id|>\n\n", false, true), v.encode("hello", false, true)...)
	if slices.Equal(whole, naive) {
		t.Fatalf("the vocabulary does not merge across a message boundary: %v", whole)
	}
	if got := v.encode("<|end_header_id|>\n\nSTOP STOP STOP", false, true); got[0] == 5 {
		t.Fatalf("the special token starting inside <|end_header_id|> did not win: %v", got)
	}
	if got := v.encode("<|r|>   x", false, true); !slices.Equal(got, []int{9, 100 + 'x'}) {
		t.Fatalf("rstrip: %v", got)
	}
}
