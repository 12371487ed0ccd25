package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"kvwin/engine"
)

// tokenizeRequest is the body of POST /tokenize. Both flags are always sent:
// llama-server's defaults (add_special false, parse_special true) are not
// what kvwin wants for message text.
type tokenizeRequest struct {
	Content      string `json:"content"`
	AddSpecial   bool   `json:"add_special"`   // insert BOS (and what else the vocabulary adds)
	ParseSpecial bool   `json:"parse_special"` // turn control-token text into control tokens
	WithPieces   bool   `json:"with_pieces"`
}

// tokenID is one element of /tokenize's tokens: an id, or {"id", "piece"}
// when pieces were asked for (kvwin does not ask, but a server that sends
// them anyway is understood).
type tokenID int

func (t *tokenID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var p struct {
			ID *int `json:"id"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.ID == nil {
			return fmt.Errorf("token %s has no id", b)
		}
		*t = tokenID(*p.ID)
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token %s is not an id", bytes.TrimSpace(b))
	}
	*t = tokenID(id)
	return nil
}

// Tokenize tokenizes text on the server; special adds BOS and parses control
// tokens, as for the embedded engine. It blocks for at most Config.Timeout.
func (b *Backend) Tokenize(ctx context.Context, text string, special bool) ([]int, error) {
	return b.TokenizeSpecial(ctx, text, special, special)
}

// TokenizeSpecial calls POST /tokenize with the two flags set apart:
// addSpecial adds BOS, parseSpecial parses control tokens. It blocks for
// at most Config.Timeout.
func (b *Backend) TokenizeSpecial(ctx context.Context, text string, addSpecial, parseSpecial bool) ([]int, error) {
	const path = "/tokenize"
	var out struct {
		Tokens *[]tokenID `json:"tokens"`
	}
	in := tokenizeRequest{Content: text, AddSpecial: addSpecial, ParseSpecial: parseSpecial}
	if err := b.call(ctx, http.MethodPost, path, in, &out); err != nil {
		return nil, err
	}
	op := http.MethodPost + " " + b.base + path
	if out.Tokens == nil {
		return nil, unavailable(op, "the answer has no tokens")
	}
	ids := make([]int, len(*out.Tokens))
	for i, t := range *out.Tokens {
		if t < 0 {
			return nil, unavailable(op, "token %d has the negative id %d", i, t)
		}
		ids[i] = int(t)
	}
	return ids, nil
}

// Detokenize turns token ids back into text on the server (POST
// /detokenize). It blocks for at most Config.Timeout.
func (b *Backend) Detokenize(ctx context.Context, tokens []int) (string, error) {
	const path = "/detokenize"
	for i, t := range tokens {
		if t < 0 {
			return "", engine.Invalid("tokens[%d]: id %d is negative", i, t)
		}
	}
	if tokens == nil {
		tokens = []int{} // "tokens": [], not null
	}
	var out struct {
		Content *string `json:"content"`
	}
	if err := b.call(ctx, http.MethodPost, path, map[string][]int{"tokens": tokens}, &out); err != nil {
		return "", err
	}
	if out.Content == nil {
		return "", unavailable(http.MethodPost+" "+b.base+path, "the answer has no content")
	}
	return *out.Content, nil
}
