package enginetest

import (
	"context"
	"math"
	"strings"
	"sync"

	"kvwin/engine"
)

// The ability types give a fake exactly the optional abilities a test
// wants, by embedding them next to *Backend in a struct of the test's own:
//
//	type tokFake struct {
//		*enginetest.Backend
//		enginetest.Tokens
//		enginetest.SlotList
//	}
//	b := enginetest.New(info)
//	f := tokFake{b, enginetest.Tokens{B: b}, enginetest.SlotList{B: b}}
//
// Each records its calls on B (Backend.Calls). Full has them all.

// The vocabulary of ByteTokens: with special, BOS first and the ChatML
// markers as control tokens; every other byte b is ByteBase+b.
const (
	BOS      = 1
	ImStart  = 2
	ImEnd    = 3
	ByteBase = 100
)

// ChatMLTemplate is the chat template Template reports by default: the
// rendering ChatML does.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Encode tokenizes text in the fake vocabulary: with special, BOS first
// and the ChatML markers as ImStart and ImEnd.
func Encode(text string, special bool) []int {
	var out []int
	if special {
		out = append(out, BOS)
	}
	for len(text) > 0 {
		switch {
		case special && strings.HasPrefix(text, "<|im_start|>"):
			out, text = append(out, ImStart), text[len("<|im_start|>"):]
		case special && strings.HasPrefix(text, "<|im_end|>"):
			out, text = append(out, ImEnd), text[len("<|im_end|>"):]
		default:
			out, text = append(out, ByteBase+int(text[0])), text[1:]
		}
	}
	return out
}

// Decode is Encode's inverse; BOS reads "<s>". An id outside the
// vocabulary is engine.Invalid.
func Decode(ids []int) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		switch {
		case id == BOS:
			b.WriteString("<s>")
		case id == ImStart:
			b.WriteString("<|im_start|>")
		case id == ImEnd:
			b.WriteString("<|im_end|>")
		case id >= ByteBase && id < ByteBase+256:
			b.WriteByte(byte(id - ByteBase))
		default:
			return "", engine.Invalid("tokens[%d]: id %d outside the vocabulary", i, id)
		}
	}
	return b.String(), nil
}

// Tokens is engine.Tokenizer in the fake vocabulary (Encode, Decode).
type Tokens struct{ B *Backend }

var _ engine.Tokenizer = Tokens{}

// Tokenize returns Encode(text, special).
func (t Tokens) Tokenize(_ context.Context, text string, special bool) ([]int, error) {
	t.B.record("Tokenize")
	return Encode(text, special), nil
}

// Detokenize returns Decode(ids).
func (t Tokens) Detokenize(_ context.Context, ids []int) (string, error) {
	t.B.record("Detokenize")
	return Decode(ids)
}

// SpecialTokens is engine.SpecialTokenizer, recording the flags of each
// call: BOS with addSpecial, the ChatML markers with parseSpecial.
type SpecialTokens struct {
	B     *Backend
	Flags *FlagLog // if set, records each call's flags
}

// FlagLog records the flags of TokenizeSpecial calls; safe for concurrent use.
type FlagLog struct {
	mu    sync.Mutex
	flags [][2]bool
}

// All returns the recorded {addSpecial, parseSpecial} pairs in order.
func (l *FlagLog) All() [][2]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][2]bool(nil), l.flags...)
}

var _ engine.SpecialTokenizer = SpecialTokens{}

// TokenizeSpecial tokenizes text with the two flags apart.
func (t SpecialTokens) TokenizeSpecial(_ context.Context, text string, addSpecial, parseSpecial bool) ([]int, error) {
	t.B.record("TokenizeSpecial")
	if t.Flags != nil {
		t.Flags.mu.Lock()
		t.Flags.flags = append(t.Flags.flags, [2]bool{addSpecial, parseSpecial})
		t.Flags.mu.Unlock()
	}
	out := Encode(text, parseSpecial)
	if parseSpecial && !addSpecial {
		out = out[1:]
	}
	if addSpecial && !parseSpecial {
		out = append([]int{BOS}, out...)
	}
	return out, nil
}

// Counter is engine.MessageCounter: a message's tokens as ChatML renders
// it in the fake vocabulary.
type Counter struct{ B *Backend }

var _ engine.MessageCounter = Counter{}

// CountMessage counts m's tokens.
func (c Counter) CountMessage(m engine.Message) int {
	c.B.record("CountMessage")
	return len(Encode("<|im_start|>"+m.Role+"\n"+m.Content+"<|im_end|>\n", true)) - 1
}

// Prompts is engine.Prompter: the prompt tokens Generate counts.
type Prompts struct{ B *Backend }

var _ engine.Prompter = Prompts{}

// Prompt returns req's prompt tokens.
func (p Prompts) Prompt(_ context.Context, req engine.Request) ([]int, error) {
	p.B.record("Prompt")
	if err := req.CheckPrompt(); err != nil {
		return nil, err
	}
	return promptTokens(req), nil
}

// Text is engine.TextRenderer: the ChatML text of a request's prompt.
type Text struct{ B *Backend }

var _ engine.TextRenderer = Text{}

// PromptText returns req's prompt as text.
func (p Text) PromptText(req engine.Request) (string, error) {
	p.B.record("PromptText")
	switch {
	case req.CheckPrompt() != nil:
		return "", req.CheckPrompt()
	case len(req.Tokens) > 0:
		return Decode(req.Tokens)
	case req.Prompt != "":
		return req.Prompt, nil
	}
	return ChatML(req.Messages), nil
}

// Template is engine.ChatTemplater and engine.ToolTemplater.
type Template struct {
	B     *Backend
	Text  string // the template; "" is ChatMLTemplate
	Tools bool   // what TemplateTools reports
}

var (
	_ engine.ChatTemplater = Template{}
	_ engine.ToolTemplater = Template{}
)

// ChatTemplate returns Text.
func (t Template) ChatTemplate() string {
	t.B.record("ChatTemplate")
	if t.Text == "" {
		return ChatMLTemplate
	}
	return t.Text
}

// TemplateTools returns Tools.
func (t Template) TemplateTools() bool {
	t.B.record("TemplateTools")
	return t.Tools
}

// SlotList is engine.SlotReporter and engine.SlotFetcher: List, or
// without it every slot Info describes, empty and idle.
type SlotList struct {
	B    *Backend
	List []engine.SlotState
}

var (
	_ engine.SlotReporter = SlotList{}
	_ engine.SlotFetcher  = SlotList{}
)

// Slots returns the slots.
func (s SlotList) Slots() []engine.SlotState {
	s.B.record("Slots")
	if s.List != nil {
		return append([]engine.SlotState(nil), s.List...)
	}
	info := s.B.Info()
	out := make([]engine.SlotState, info.Slots)
	for i := range out {
		out[i] = engine.SlotState{ID: i, Context: info.ContextSlot}
	}
	return out
}

// FetchSlots returns the slots, or ctx's error.
func (s SlotList) FetchSlots(ctx context.Context) ([]engine.SlotState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Slots(), nil
}

// Healthy is engine.HealthChecker, answering Fail.
type Healthy struct {
	B    *Backend
	Fail error
}

var _ engine.HealthChecker = Healthy{}

// Health returns Fail, or ctx's error.
func (h Healthy) Health(ctx context.Context) error {
	h.B.record("Health")
	if err := ctx.Err(); err != nil {
		return err
	}
	return h.Fail
}

// Forgetter is engine.ConversationForgetter: it reports one store for
// each conversation it was asked to forget that Generate served.
type Forgetter struct{ B *Backend }

var _ engine.ConversationForgetter = Forgetter{}

// ForgetConversation reports 1 if a request of tenant's conversation was
// served, else 0.
func (f Forgetter) ForgetConversation(_ context.Context, tenant, conversation string) (int, error) {
	f.B.record("ForgetConversation")
	for _, r := range f.B.Requests() {
		if r.Tenant == tenant && r.Conversation == conversation {
			return 1, nil
		}
	}
	return 0, nil
}

// Embeds is engine.Embedder: each input's vector is its byte histogram
// over Width dimensions (default 8), made unit length.
type Embeds struct {
	B     *Backend
	Width int
}

var _ engine.Embedder = Embeds{}

// Embed embeds every input, or fails with engine.Invalid on an empty one.
func (e Embeds) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	e.B.record("Embed")
	if err := ctx.Err(); err != nil {
		return engine.Embeddings{}, err
	}
	width := e.Width
	if width == 0 {
		width = 8
	}
	var out engine.Embeddings
	for i, in := range req.Inputs {
		if in == "" {
			return engine.Embeddings{}, engine.Invalid("input[%d] is empty", i)
		}
		v := make([]float32, width)
		for j := 0; j < len(in); j++ {
			v[int(in[j])%width]++
		}
		var norm float64
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		for j := range v {
			v[j] = float32(float64(v[j]) / math.Sqrt(norm))
		}
		out.Vectors = append(out.Vectors, v)
		out.PromptTokens += len(Encode(in, false))
	}
	return out, nil
}

// Full is a fake with every ability above.
type Full struct {
	*Backend
	Tokens
	SpecialTokens
	Counter
	Prompts
	Template
	SlotList
	Healthy
	Forgetter
	Embeds
}

// NewFull returns a Full around b.
func NewFull(b *Backend) *Full {
	return &Full{b, Tokens{B: b}, SpecialTokens{B: b}, Counter{B: b}, Prompts{B: b},
		Template{B: b}, SlotList{B: b}, Healthy{B: b}, Forgetter{B: b}, Embeds{B: b}}
}

var (
	_ engine.Backend               = (*Full)(nil)
	_ engine.Tokenizer             = (*Full)(nil)
	_ engine.SpecialTokenizer      = (*Full)(nil)
	_ engine.MessageCounter        = (*Full)(nil)
	_ engine.Prompter              = (*Full)(nil)
	_ engine.ChatTemplater         = (*Full)(nil)
	_ engine.ToolTemplater         = (*Full)(nil)
	_ engine.SlotReporter          = (*Full)(nil)
	_ engine.SlotFetcher           = (*Full)(nil)
	_ engine.HealthChecker         = (*Full)(nil)
	_ engine.ConversationForgetter = (*Full)(nil)
	_ engine.Embedder              = (*Full)(nil)
)
