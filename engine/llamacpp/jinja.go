package llamacpp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
	"kvwin/engine/chattemplate"
	"kvwin/kvcache"
)

// jinjaRenderer renders the model's own chat template (Jinja) and tokenizes
// it piece by piece: the template's structure with control-token parsing,
// message text without. Text a client sends therefore never becomes a
// control token under any template, and a message's text tokenizes the same
// way every turn, so a conversation's earlier turns keep their tokens.
type jinjaRenderer struct {
	m       *llama.Model
	t       *chattemplate.Template
	bosText string
	bos     []int // prepended when the model adds BOS and the template does not write it
	cache   *kvcache.TokenCache
	prompts *kvcache.PromptCache // rendered prefixes; nil disables it
	// chatml: the template renders as ChatML does (isChatML), so its
	// pieces are written natively instead of by running it, which costs
	// the whole conversation every turn.
	chatml bool
	id     string
	log    *slog.Logger
	loose  sync.Once // logs once that the template transforms message text
	// guard holds the user-defined tokens the template's structure uses
	// (on the probe conversation), by id: llama.cpp matches those even in
	// plain text, so message text holding one is tokenized around it.
	guard map[int]string
	// controls are the texts of the vocabulary's control tokens and of
	// guard: tool definitions, which the template renders as structure,
	// must not hold them.
	controls []string
	// none is the rendering of no message (just the BOS if the template
	// refuses it), what count subtracts; computed at start.
	none []int
}

// Keys of the token cache: structure and message text tokenize differently.
const (
	pieceStructure = "\x00structure"
	pieceText      = "\x00text"
)

func newJinjaRenderer(m *llama.Model, t *chattemplate.Template, bosText string, cache *kvcache.TokenCache, prompts *kvcache.PromptCache, id string, log *slog.Logger) (*jinjaRenderer, error) {
	r := &jinjaRenderer{m: m, t: t, bosText: bosText, cache: cache, prompts: prompts, id: id, log: log}
	if m.AddBOSToken() {
		bos, err := m.Tokenize("", true, false)
		if err != nil {
			return nil, fmt.Errorf("tokenize BOS: %w", err)
		}
		r.bos = bos
	}
	r.guard = map[int]string{}
	pieces, _, err := t.Render(chattemplate.Probe, nil, true)
	if err != nil {
		return nil, err
	}
	for _, p := range pieces {
		if p.Content {
			continue
		}
		ids, err := m.Tokenize(p.Text, false, true)
		if err != nil {
			return nil, fmt.Errorf("tokenize the template's structure: %w", err)
		}
		for _, id := range ids {
			if userDefined(m, id) {
				// Whitespace runs (Gemma has user-defined ones) are
				// text whatever the tokenizer does.
				if text := specialPiece(m, id); len(text) > 1 && strings.TrimSpace(text) != "" {
					r.guard[id] = text
				}
			}
		}
	}
	for id := range m.NumVocab() {
		if control(m, id) {
			if text := specialPiece(m, id); len(text) > 1 {
				r.controls = append(r.controls, text)
			}
		}
	}
	for _, text := range r.guard {
		r.controls = append(r.controls, text)
	}
	if none, err := r.tokenize("", false, nil, nil, false, nil); err == nil {
		r.none = none
	} else {
		r.none = r.bos
	}
	if !t.Stable {
		log.Warn("chat template rewrites earlier turns: a conversation's next turn does not extend its previous prompt, so KV reuse stops where the tokens first differ")
	}
	return r, nil
}

func (r *jinjaRenderer) name() string { return "jinja" }

// tokens tokenizes one piece through the token cache.
func (r *jinjaRenderer) tokens(dst []int, tenant string, p chattemplate.Piece, sp *spent) ([]int, error) {
	kind := pieceStructure
	if p.Content {
		kind = pieceText
	}
	if r.cache != nil {
		if out, ok := r.cache.Append(dst, tokenSpace(r.id, tenant), kind, p.Text); ok {
			return out, nil
		}
	}
	start := time.Now()
	ids, err := r.m.Tokenize(p.Text, false, !p.Content)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if p.Content && r.guarded(ids) {
		if ids, err = r.plain(p.Text); err != nil {
			return nil, err
		}
	}
	sp.since(start)
	if r.cache != nil {
		r.cache.Put(tokenSpace(r.id, tenant), kind, p.Text, ids)
	}
	return append(dst, ids...), nil
}

func (r *jinjaRenderer) guarded(ids []int) bool {
	for _, id := range ids {
		if _, ok := r.guard[id]; ok {
			return true
		}
	}
	return false
}

// plain tokenizes message text that holds the text of a guarded token: each
// occurrence is tokenized as its first byte and its rest apart, so it stays
// text ("<" + "start_of_turn>").
func (r *jinjaRenderer) plain(text string) ([]int, error) {
	var out []int
	add := func(s string) error {
		if s == "" {
			return nil
		}
		ids, err := r.m.Tokenize(s, false, false)
		if err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		if r.guarded(ids) {
			return engine.Invalid("message text cannot be tokenized as plain text")
		}
		out = append(out, ids...)
		return nil
	}
	for text != "" {
		at, word := -1, ""
		for _, w := range r.guard {
			if i := strings.Index(text, w); i >= 0 && (at < 0 || i < at || (i == at && len(w) > len(word))) {
				at, word = i, w
			}
		}
		if at < 0 {
			return out, add(text)
		}
		for _, s := range []string{text[:at], word[:1], word[1:]} {
			if err := add(s); err != nil {
				return nil, err
			}
		}
		text = text[at+len(word):]
	}
	return out, nil
}

// tokenize renders msgs and tokenizes the pieces. BOS is prepended when the
// model adds one and the template did not write it itself (llama-server's
// rule, so a prompt never starts with two).
//
// With cached (a chat turn's prompt) and no tools, the tokens of
// the longest cached prefix whose pieces are this rendering's first pieces,
// text for text (compared by signature), are reused: each piece tokenizes on
// its own, so equal pieces give equal tokens, and a template that rewrote
// earlier text is simply a miss.
func (r *jinjaRenderer) tokenize(tenant string, cached bool, msgs []engine.Message, tools []any, addGen bool, sp *spent) ([]int, error) {
	if err := r.checkTools(tools, "tools"); err != nil {
		return nil, err
	}
	if r.chatml && cached && len(tools) == 0 && r.prompts != nil {
		return r.tokenizeChatML(tenant, msgs, addGen, sp)
	}
	var pieces []chattemplate.Piece
	var ok bool
	var err error
	if r.chatml && len(tools) == 0 {
		pieces, ok, err = r.t.RenderChatML(msgs, addGen)
	} else {
		pieces, ok, err = r.t.Render(msgs, tools, addGen)
	}
	if err != nil {
		if errors.Is(err, chattemplate.ErrRender) {
			return nil, engine.Invalid("%v", err)
		}
		return nil, err
	}
	if !ok {
		// The template cut or rewrote message text (Qwen 3 strips
		// reasoning: content.split('</think>')[-1]), so a part of it may
		// sit in a structure piece. That is harmless unless the text holds
		// a control token's text, which is then refused.
		r.loose.Do(func() {
			r.log.Warn("chat template rewrites message text beyond trimming; messages holding control-token text are refused")
		})
		for i, m := range msgs {
			for _, c := range r.controls {
				if strings.Contains(m.Content, c) {
					return nil, engine.Invalid("messages[%d] holds the control-token text %q, which this model's chat template would not keep as text", i, c)
				}
			}
		}
	}
	var keys []kvcache.ChainKey
	if cached && len(tools) == 0 {
		keys = chainKeys(r.prompts, tenant, r.id+"\x00"+r.name(), msgs, strconv.FormatBool(addGen))
	}
	sigs := make([]kvcache.Signature, 0, len(pieces)+1)
	if keys != nil {
		var sig kvcache.Signature
		sigs = append(sigs, sig)
		for _, p := range pieces {
			sig = sig.Add(pieceKind(p), p.Text)
			sigs = append(sigs, sig)
		}
	}
	var out []int
	from := 0
	p, _ := longestPrefix(r.prompts, keys, func(p *kvcache.Prefix) bool {
		return p.Pieces > 0 && p.Pieces < len(sigs) && sigs[p.Pieces] == p.Sig
	})
	if p != nil {
		out, from = p.AppendTo(make([]int, 0, p.Len()+64)), p.Pieces
	} else if len(r.bos) > 0 && (r.bosText == "" || len(pieces) == 0 || pieces[0].Content || !strings.HasPrefix(pieces[0].Text, r.bosText)) {
		out = append(out, r.bos...)
	}
	ends := make([]int, len(pieces)) // out's length after each piece
	for i := from; i < len(pieces); i++ {
		if out, err = r.tokens(out, tenant, pieces[i], sp); err != nil {
			return nil, err
		}
		ends[i] = len(out)
	}
	r.remember(keys, msgs, pieces, sigs, ends, out, from, p)
	return out, nil
}

// tokenizeChatML is tokenize for a turn under a ChatML template: only the
// messages after the longest prefix the prompt cache holds are rendered
// (AppendChatML continues a rendering through a message's text) and
// tokenized, and the signature of the pieces continues the cached one, so a
// turn costs its new messages, not the conversation. The cached prefix is
// taken on its key alone: the key names the tenant, the renderer and every
// message before it, and ChatML renders those the same way whatever
// follows. What it stores is what tokenize stores for the same messages.
func (r *jinjaRenderer) tokenizeChatML(tenant string, msgs []engine.Message, addGen bool, sp *spent) ([]int, error) {
	keys := chainKeys(r.prompts, tenant, r.id+"\x00"+r.name(), msgs, strconv.FormatBool(addGen))
	var (
		out  []int
		sig  kvcache.Signature
		base int // the pieces the cached prefix holds
	)
	p, k := longestPrefix(r.prompts, keys, func(p *kvcache.Prefix) bool { return p.Pieces > 0 })
	rest := msgs
	if p != nil {
		out = p.AppendTo(make([]int, 0, p.Len()+64*(len(msgs)-k)+16))
		sig, base, rest = p.Sig, p.Pieces, msgs[k:]
	}
	pieces, err := r.t.AppendChatML(make([]chattemplate.Piece, 0, 2*len(rest)+1), rest, p != nil, addGen)
	if err != nil {
		return nil, engine.Invalid("%v", err)
	}
	if p == nil && len(r.bos) > 0 && (r.bosText == "" || len(pieces) == 0 || pieces[0].Content || !strings.HasPrefix(pieces[0].Text, r.bosText)) {
		out = append(out, r.bos...)
	}
	// Prefixes are stored through the last two messages' texts, where
	// every message has a text piece (remember's rule).
	storable := true
	for _, m := range rest {
		storable = storable && m.Content != ""
	}
	type mark struct {
		msgs, tokens, pieces int
		sig                  kvcache.Signature
	}
	var marks []mark
	done := k // messages whose text is tokenized
	for i, pc := range pieces {
		if out, err = r.tokens(out, tenant, pc, sp); err != nil {
			return nil, err
		}
		sig = sig.Add(pieceKind(pc), pc.Text)
		if pc.Content {
			if done++; storable && done >= len(msgs)-1 {
				marks = append(marks, mark{done, len(out), base + i + 1, sig})
			}
		}
	}
	like := p // the prefix out was rendered from, then the last one stored
	for _, m := range marks {
		like = r.prompts.Put(keys[m.msgs], out[:m.tokens], m.sig, m.pieces, like)
	}
	return out, nil
}

// remember stores this rendering's prefixes: up to the last message's text
// and up to the one before it, where each message rendered as one text
// piece (otherwise which pieces belong to which message is not known, and
// nothing is stored). out was rendered from the cached prefix p (nil: none).
func (r *jinjaRenderer) remember(keys []kvcache.ChainKey, msgs []engine.Message, pieces []chattemplate.Piece, sigs []kvcache.Signature, ends, out []int, from int, p *kvcache.Prefix) {
	if keys == nil {
		return
	}
	var texts []int // the index of each text piece
	for i, p := range pieces {
		if p.Content {
			texts = append(texts, i)
		}
	}
	if len(texts) != len(msgs) {
		return
	}
	for k := len(msgs); k >= max(1, len(msgs)-1); k-- {
		end := texts[k-1] + 1 // the pieces through message k's text
		if end <= from {
			return // already cached
		}
		p = r.prompts.Put(keys[k], out[:ends[end-1]], sigs[end], end, p)
	}
}

func pieceKind(p chattemplate.Piece) byte {
	if p.Content {
		return 't'
	}
	return 's'
}

// render renders the conversation with the generation prompt. The template
// decides the layout, so nothing is padded (padSinks is a ChatML ability).
func (r *jinjaRenderer) render(tenant string, msgs []engine.Message, tools []any, _, _ int, sp *spent) ([]int, error) {
	return r.tokenize(tenant, true, msgs, tools, true, sp)
}

// checkTools refuses tool definitions holding a control token's text: the
// template renders them as structure, where it would parse as the token.
func (r *jinjaRenderer) checkTools(v any, at string) error {
	switch v := v.(type) {
	case json.RawMessage:
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return engine.Invalid("%s is not JSON", at)
		}
		return r.checkTools(x, at)
	case string:
		for _, c := range r.controls {
			if strings.Contains(v, c) {
				return engine.Invalid("%s holds the control-token text %q", at, c)
			}
		}
	case []any:
		for i, x := range v {
			if err := r.checkTools(x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, x := range v {
			if err := r.checkTools(k, at); err != nil {
				return err
			}
			if err := r.checkTools(x, at+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// count is a message's tokens in the rendering: the rendering of the message
// alone, less what the template writes for no message at all (a BOS, a
// default system turn). A template that refuses either conversation (a
// system message under Gemma) falls back to the message's text plus four.
func (r *jinjaRenderer) count(tenant string, m engine.Message) int {
	one, err := r.tokenize(tenant, false, []engine.Message{m}, nil, false, nil)
	if err != nil {
		ids, err := r.m.Tokenize(m.Content, false, false)
		if err != nil {
			return engine.EstimateTokens(len(m.Content))
		}
		return len(ids) + 4
	}
	none := r.none
	if !prefixOf(none, one) {
		none = r.bos
	}
	return max(len(one)-len(none), 1)
}

func prefixOf(a, b []int) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
