package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"kvwin/engine"
	"kvwin/kvcache"
)

// How a template the server renders (/apply-template) is tokenized without
// sending the whole conversation to /tokenize every turn.
//
// The cut. llama.cpp, with parse_special on, first splits the text at every
// special token's text (longest first) and then tokenizes each piece of
// plain text between them on its own; BPE and SPM never merge across a
// special token, and SPM's leading space restarts after one exactly as at
// the start of a text. So at the start s of a control token X the
// tokenization splits: whole(text) = whole(text[:s]) + whole(text[s:]),
// where the second part begins with X. The text from X on is tokenized
// standalone with X included, so whatever X does to its neighbours (the
// rstrip of a token that eats the whitespace after it) happens the same
// way, and the answer's first id must be X: if it is not (a longer special
// token starting inside X's text won), the cut is not used. What this
// does not see is a special token starting before X whose text holds all
// of X's and more; no vocabulary kvwin knows has one (their special
// tokens are delimited, <|…|>, <…>, […]), so none is looked for.
//
// The cache. After a render the backend keeps, in a kvcache.PromptCache
// under the message-chain key of (tenant, c.ns, every message rendered),
// the ids up to and including the last control token X of the text whose
// byte offsets are exact, the offset s where X starts (Prefix.Pieces) and
// a 128-bit hash of text[:s] (Prefix.Sig). The next turn of the
// conversation repeats those messages and adds some: the chain keys of
// its message prefixes find the entry (the previous turn's, usually); it
// is used if the new text's first s bytes hash the same, and then only
// text[s:] goes to /tokenize. A template that rewrites earlier text when a
// message is added fails the hash and the whole text is tokenized; an
// entry names its tenant, so it never serves another.
//
// Offsets come from /tokenize's pieces (with_pieces): a token's end is the
// sum of the pieces' bytes before it, trusted only as far as the pieces
// put together are the text byte for byte (see spells for the whitespace
// that SPM pieces and stripping control tokens spell differently); a
// vocabulary that adds a space to the text disables cuts (piecesExact). Which ids
// are control tokens is asked once per id and kept per chat (see
// controlIDs). Whatever cannot be established exactly makes the turn
// tokenize the whole text: slower, never different.

// maxControlProbes bounds the ids a render classifies (two /tokenize calls
// at most each, then never again for the chat): the cut is near the text's
// end, after the generation prompt's last control token, so a few suffice.
const maxControlProbes = 8

// maxSigChecks bounds the cached entries a lookup hashes the text for.
const maxSigChecks = 4

// sigText is the Signature kind of the text hashed up to a cut.
const sigText = 't'

// maxControlIDs bounds the ids whose class a chat remembers.
const maxControlIDs = 1 << 16

// controlIDs remembers which token ids are control tokens on one server and
// model: llama.cpp splits text at those before tokenizing. An id is one iff
// its piece tokenizes, with parse_special, to that id alone and, without
// parse_special, to something else. (A plain token whose piece tokenizes
// to itself does so either way: without a control token in it both calls
// split the same; an unreachable plain token fails the first test.)
type controlIDs struct {
	mu sync.Mutex
	is map[int]bool
}

// lookup returns the remembered class of id.
func (c *controlIDs) lookup(id int) (control, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	control, known = c.is[id]
	return control, known
}

func (c *controlIDs) remember(id int, control bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.is == nil {
		c.is = make(map[int]bool)
	}
	if len(c.is) < maxControlIDs {
		c.is[id] = control
	}
}

// isControl classifies id, whose piece is piece, asking the server the
// first time.
func (b *Backend) isControl(ctx context.Context, c *chat, id int, piece []byte) (bool, error) {
	if control, known := c.control.lookup(id); known {
		return control, nil
	}
	control := false
	if utf8.Valid(piece) && len(piece) > 0 {
		plain, err := b.TokenizeSpecial(ctx, string(piece), false, false)
		if err != nil {
			return false, err
		}
		if !slices.Equal(plain, []int{id}) {
			parsed, err := b.TokenizeSpecial(ctx, string(piece), false, true)
			if err != nil {
				return false, err
			}
			control = slices.Equal(parsed, []int{id})
		}
	}
	c.control.remember(id, control)
	return control, nil
}

// tokenPiece is an element of /tokenize's tokens with pieces: {"id",
// "piece"}, the piece a string or, when not valid UTF-8, its bytes; a bare
// id from a server that ignores with_pieces has no piece.
type tokenPiece struct {
	id    int
	piece []byte
	ok    bool // the piece was given
}

func (t *tokenPiece) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		var id tokenID
		if err := id.UnmarshalJSON(b); err != nil {
			return err
		}
		*t = tokenPiece{id: int(id)}
		return nil
	}
	var p struct {
		ID    *int            `json:"id"`
		Piece json.RawMessage `json:"piece"`
	}
	if err := json.Unmarshal(b, &p); err != nil || p.ID == nil {
		return fmt.Errorf("token %s has no id", b)
	}
	*t = tokenPiece{id: *p.ID}
	var s string
	var raw []byte
	switch {
	case len(p.Piece) == 0:
	case json.Unmarshal(p.Piece, &s) == nil:
		t.piece, t.ok = []byte(s), true
	case json.Unmarshal(p.Piece, &raw) == nil: // an array of byte values
		t.piece, t.ok = raw, true
	}
	return nil
}

// tokenizePieces tokenizes text without BOS, control tokens parsed, and
// returns the ids and the byte offset where each of the first len(ends)
// tokens ends: as far as the pieces put together are text.
func (b *Backend) tokenizePieces(ctx context.Context, text string) (ids, ends []int, pieces [][]byte, err error) {
	const path = "/tokenize"
	var out struct {
		Tokens *[]tokenPiece `json:"tokens"`
	}
	in := tokenizeRequest{Content: text, ParseSpecial: true, WithPieces: true}
	if err := b.call(ctx, http.MethodPost, path, in, &out); err != nil {
		return nil, nil, nil, err
	}
	op := http.MethodPost + " " + b.base + path
	if out.Tokens == nil {
		return nil, nil, nil, unavailable(op, "the answer has no tokens")
	}
	ids, pieces = make([]int, len(*out.Tokens)), make([][]byte, len(*out.Tokens))
	at, exact := 0, true
	for i, t := range *out.Tokens {
		if t.id < 0 {
			return nil, nil, nil, unavailable(op, "token %d has the negative id %d", i, t.id)
		}
		ids[i], pieces[i] = t.id, t.piece
		if exact = exact && t.ok && len(t.piece) > 0; !exact {
			continue
		}
		end, ok := spells(text, at, t.piece)
		if !ok {
			// A control token with lstrip or rstrip drops the whole run
			// of whitespace beside it from the tokens.
			at += len(text[at:]) - len(strings.TrimLeft(text[at:], asciiSpace))
			end, ok = spells(text, at, t.piece)
		}
		if exact = ok; exact {
			at = end
			ends = append(ends, at)
		}
	}
	return ids, ends, pieces, nil
}

// spells returns where piece ends if it spells text from at: byte for byte,
// but that a "▁" (U+2581) of the piece may stand for a space of the text,
// as SPM vocabularies' user-defined whitespace tokens ("▁▁", Gemma's) give
// their pieces.
func spells(text string, at int, piece []byte) (int, bool) {
	const lower = "\u2581"
	for len(piece) > 0 {
		if at < len(text) && text[at] == ' ' && string(piece[:min(len(piece), len(lower))]) == lower {
			piece, at = piece[len(lower):], at+1
			continue
		}
		if at >= len(text) || text[at] != piece[0] {
			return at, false
		}
		piece, at = piece[1:], at+1
	}
	return at, true
}

// asciiSpace is what llama.cpp's strip rules take for whitespace (isspace).
const asciiSpace = " \t\n\v\f\r"

// piecesExact reports whether cuts can be established on the server,
// asking once per chat. Its pieces must spell a plain text as it was
// written (SPM vocabularies that add a space before the text, and after
// every control token, do not), and it must tell control tokens apart:
// BOS must classify as one (the June 2025 build parses control tokens
// whatever parse_special says, so none would). Otherwise no offset is
// trusted and nothing is cut.
func (b *Backend) piecesExact(ctx context.Context, c *chat) (bool, error) {
	c.probe.Lock()
	defer c.probe.Unlock()
	if c.probed {
		return c.exact, nil
	}
	const probe = "kvwin"
	_, ends, _, err := b.tokenizePieces(ctx, probe)
	if err != nil {
		return false, err
	}
	exact := len(ends) > 0 && ends[len(ends)-1] == len(probe)
	if exact && len(c.bos) == 1 {
		text, err := b.Detokenize(ctx, c.bos)
		if err != nil {
			return false, err
		}
		if exact, err = b.isControl(ctx, c, c.bos[0], []byte(text)); err != nil {
			return false, err
		}
	}
	c.probed, c.exact = true, exact
	return exact, nil
}

// lastCut returns the index i ≥ from of the last control token among the
// tokens whose ends are known, or -1: the token at i starts a text that
// tokenizes on its own.
func (b *Backend) lastCut(ctx context.Context, c *chat, ends []int, ids []int, pieces [][]byte, from int) (int, error) {
	probes := 0
	for i := len(ends) - 1; i >= from; i-- {
		if _, known := c.control.lookup(ids[i]); !known {
			if probes++; probes > maxControlProbes {
				return -1, nil
			}
		}
		control, err := b.isControl(ctx, c, ids[i], pieces[i])
		if err != nil {
			return -1, err
		}
		if control {
			return i, nil
		}
	}
	return -1, nil
}

// tokenizeRendered returns the tokens of text, the rendering of msgs for
// tenant (without BOS added), from the cached prefix of an earlier turn
// and /tokenize of the rest, or of all of it. It offers the result to the
// cache for the next turn.
func (b *Backend) tokenizeRendered(ctx context.Context, c *chat, tenant, text string, msgs []engine.Message) ([]int, error) {
	if exact, err := b.piecesExact(ctx, c); err != nil || !exact {
		if err != nil {
			return nil, err
		}
		return b.TokenizeSpecial(ctx, text, false, true)
	}
	keys := engine.PromptKeys(tenant, kvcache.Root(tenant, c.ns), msgs)
	checks := 0
	p, _ := b.prompts.Longest(keys, func(p *kvcache.Prefix) bool {
		if checks++; checks > maxSigChecks || p.Len() == 0 || p.Pieces > len(text) {
			return false
		}
		return kvcache.Signature{}.Add(sigText, text[:p.Pieces]) == p.Sig
	})
	var prefix []int
	at := 0 // where the text tokenized starts
	if p != nil {
		prefix, at = p.AppendTo(nil), p.Pieces
		prefix = prefix[:len(prefix)-1]
	}
	ids, ends, pieces, err := b.tokenizePieces(ctx, text[at:])
	if err != nil {
		return nil, err
	}
	from := 0
	if p != nil {
		if len(ids) == 0 || ids[0] != p.Last() {
			// The cut did not hold: tokenize it all.
			b.log.Debug("the cached cut did not tokenize on its own; tokenizing the whole rendering")
			p, prefix, at = nil, nil, 0
			if ids, ends, pieces, err = b.tokenizePieces(ctx, text); err != nil {
				return nil, err
			}
		} else {
			from = 1 // ids[0] is the cut already cached
		}
	}
	i, err := b.lastCut(ctx, c, ends, ids, pieces, from)
	if err != nil {
		return nil, err
	}
	out := append(prefix, ids...)
	switch {
	case i > 0: // a cut at 0 would save nothing
		start := at + ends[i-1]
		b.prompts.Put(keys[len(msgs)], out[:len(prefix)+i+1], kvcache.Signature{}.Add(sigText, text[:start]), start, p)
	case p != nil:
		// No control token in the new part: the old cut still holds.
		b.prompts.Put(keys[len(msgs)], out[:len(prefix)+1], p.Sig, p.Pieces, p)
	}
	return out, nil
}
