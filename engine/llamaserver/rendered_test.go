package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"kvwin/internal/ident"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"kvwin/engine"
)

// vocabBackend is a Backend for s.
func vocabBackend(t *testing.T, s *vocabServer) *Backend {
	t.Helper()
	b, err := New(Config{BaseURL: s.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func templateMsgs(msgs []engine.Message) []struct{ Role, Content string } {
	out := make([]struct{ Role, Content string }, len(msgs))
	for i, m := range msgs {
		out[i].Role, out[i].Content = m.Role, m.Content
	}
	return out
}

// wholeTokens is the prompt without any cache: the whole rendering
// tokenized, BOS put first if missing.
func wholeTokens(s *vocabServer, msgs []engine.Message) (string, []int) {
	text := s.template(templateMsgs(msgs))
	ids := s.v.encode(text, false, true)
	if len(ids) == 0 || ids[0] != 1 {
		ids = append([]int{1}, ids...)
	}
	return text, ids
}

// turnSent is what one turn sent to /tokenize with pieces: the contents.
func turnSent(s *vocabServer, before int) []string {
	reqs, _ := s.sent()
	var out []string
	for _, r := range reqs[before:] {
		if r.WithPieces {
			out = append(out, r.Content)
		}
	}
	return out
}

// promptTurn renders msgs for tenant and checks the tokens against the
// whole tokenization; it returns what went to /tokenize with pieces.
func promptTurn(t *testing.T, s *vocabServer, b *Backend, tenant string, msgs []engine.Message) []string {
	t.Helper()
	before := len(must(s.sent()))
	got, err := b.Prompt(context.Background(), engine.Request{Owner: ident.Owner{Tenant: tenant}, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	b.prompts.Wait()
	if text, want := wholeTokens(s, msgs); !slices.Equal(got, want) {
		t.Fatalf("tenant %q, %d messages, text %q:\n got %v\nwant %v", tenant, len(msgs), text, got, want)
	}
	return turnSent(s, before)
}

func must[T any](v T, _ int) T { return v }

// contentFrags are what random messages are made of: text that merges
// across boundaries, whitespace runs, code, emoji (whose halves are pieces),
// and text that is or looks like control tokens.
var contentFrags = []string{"hello", " world", "\n", "\n\n", "  ", "   ", "\t}", "func main() {\n\tx := 1\n}",
	"😀", "é", "日本", "<|eot_id|>", "<|eot", "_id|>", "<|start_header_id|>", "[INST]", "[/INST]", "<|r|>",
	"<|l|>", "<tool>", "STOP STOP STOP", "lo", "ab", "bab", ".", " \n\n", "STOP", "<|begin_of_text|>"}

func randomContent(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(7) {
		b.WriteString(contentFrags[rng.IntN(len(contentFrags))])
	}
	return b.String()
}

// nextTurn changes a conversation as clients do: mostly an answer and a
// new message appended; sometimes the same turn again, an earlier message
// edited, or the oldest turn dropped (a window).
func nextTurn(rng *rand.Rand, msgs []engine.Message) (out []engine.Message, appended bool) {
	out = slices.Clone(msgs)
	switch r := rng.IntN(10); {
	case r < 6:
		return append(out, engine.Message{Role: engine.RoleAssistant, Content: randomContent(rng)},
			engine.Message{Role: engine.RoleUser, Content: randomContent(rng)}), true
	case r < 7:
		return out, false
	case r < 8:
		i := rng.IntN(len(out))
		out[i].Content = randomContent(rng)
		return out, false
	default:
		if i := slices.IndexFunc(out, func(m engine.Message) bool { return m.Role != engine.RoleSystem }); i >= 0 && len(out) > i+2 {
			return slices.Delete(out, i, i+2), false
		}
		return out, false
	}
}

// TestRenderedIncrementalEqualsWhole: over many random multi-turn
// conversations of several tenants, every template's prompt is id for id
// the whole text's tokenization, with a vocabulary that merges across
// message boundaries; prefix-stable templates send only tails, templates
// that rewrite earlier text when a message is added reuse nothing then.
func TestRenderedIncrementalEqualsWhole(t *testing.T) {
	names := []string{"count", "inst", "lastsys", "llama3", "plain", "strip", "nopieces", "spm", "alwaysparse", "gemma"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tmpl := vocabTemplates[name]
			if name == "nopieces" || name == "spm" || name == "alwaysparse" || name == "gemma" {
				tmpl = llama3
			}
			s := startVocabServer(t, tmpl)
			s.pieces = name != "nopieces"
			s.v.spacePrefix = name == "spm"
			s.alwaysParse = name == "alwaysparse"
			s.v.escapedSpaces = name == "gemma"
			b := vocabBackend(t, s)
			rng := rand.New(rand.NewPCG(26, uint64(len(name))))
			reused, appendedReused, appendedTurns := 0, 0, 0
			for conv := range 60 {
				tenant := fmt.Sprintf("tenant-%d", conv%3)
				var msgs []engine.Message
				if rng.IntN(2) == 0 {
					msgs = append(msgs, engine.Message{Role: engine.RoleSystem, Content: randomContent(rng)})
				}
				msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: randomContent(rng)})
				appended := false
				for range 1 + rng.IntN(8) {
					sent := promptTurn(t, s, b, tenant, msgs)
					text := s.template(templateMsgs(msgs))
					tail := len(sent) == 1 && len(sent[0]) < len(text)
					if tail {
						reused++
					}
					if appended {
						appendedTurns++
						if tail {
							appendedReused++
						}
					}
					msgs, appended = nextTurn(rng, msgs)
				}
			}
			t.Logf("%d turns sent a tail only; of %d that appended messages, %d", reused, appendedTurns, appendedReused)
			switch name {
			case "count", "nopieces", "spm", "alwaysparse":
				if appendedReused != 0 {
					t.Errorf("%d turns that appended messages reused a prefix; the template rewrites or has no cut", appendedReused)
				}
			case "llama3", "inst", "strip", "gemma":
				if appendedReused < appendedTurns/2 {
					t.Errorf("only %d of %d turns that appended messages sent a tail", appendedReused, appendedTurns)
				}
			}
		})
	}
}

// TestRenderedCutNotHolding: an answer that makes a longer special token
// start inside the cached cut's control token: the tail does not begin
// with it, and the turn tokenizes the whole text.
func TestRenderedCutNotHolding(t *testing.T) {
	s := startVocabServer(t, llama3)
	b := vocabBackend(t, s)
	u1 := engine.Message{Role: engine.RoleUser, Content: "hello"}
	promptTurn(t, s, b, "", []engine.Message{u1})
	msgs := []engine.Message{u1, {Role: engine.RoleAssistant, Content: "STOP STOP STOP"}, {Role: engine.RoleUser, Content: "ab"}}
	sent := promptTurn(t, s, b, "", msgs)
	text, _ := wholeTokens(s, msgs)
	if len(sent) != 2 || sent[1] != text {
		t.Fatalf("sent %q, want a tail then the whole text", sent)
	}
}

// TestRenderedTenantsApart: one tenant's tokenized rendering never serves
// another's identical conversation.
func TestRenderedTenantsApart(t *testing.T) {
	s := startVocabServer(t, llama3)
	b := vocabBackend(t, s)
	u1 := engine.Message{Role: engine.RoleUser, Content: "hello"}
	turn2 := []engine.Message{u1, {Role: engine.RoleAssistant, Content: " world"}, {Role: engine.RoleUser, Content: "ab"}}
	text, _ := wholeTokens(s, turn2)
	promptTurn(t, s, b, "alice", []engine.Message{u1})
	if sent := promptTurn(t, s, b, "alice", turn2); len(sent) != 1 || len(sent[0]) >= len(text) {
		t.Fatalf("alice's second turn sent %q, want a tail", sent)
	}
	for _, tenant := range []string{"bob", ""} {
		if sent := promptTurn(t, s, b, tenant, turn2); len(sent) != 1 || sent[0] != text {
			t.Fatalf("tenant %q sent %q, want the whole text: nothing of alice's", tenant, sent)
		}
	}
	if hits, _ := b.prompts.Stats(); hits != 1 {
		t.Fatalf("%d prompt cache hits, want alice's one", hits)
	}
}

// TestRenderedTokenizesOnlyTheTail: a turn that appends an answer and a
// short message sends /tokenize the same few bytes at 2 messages of
// history as at 242: from the last control token of the previous turn's
// text on, once its ids are classified.
func TestRenderedTokenizesOnlyTheTail(t *testing.T) {
	const tail = "<|end_header_id|>\n\nSure.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd then?<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	var sizes []int
	for _, n := range []int{2, 242} {
		s := startVocabServer(t, llama3)
		b := vocabBackend(t, s)
		history := longHistory(n)
		promptTurn(t, s, b, "t", history)
		turn := append(slices.Clone(history), engine.Message{Role: engine.RoleAssistant, Content: "Sure."},
			engine.Message{Role: engine.RoleUser, Content: "And then?"})
		reqs, bytesBefore := s.sent()
		sent := promptTurn(t, s, b, "t", turn)
		after, bytesAfter := s.sent()
		if len(after)-len(reqs) != 1 || len(sent) != 1 || sent[0] != tail {
			t.Fatalf("%d messages: the turn sent %q in %d /tokenize calls, want one of %q", n, sent, len(after)-len(reqs), tail)
		}
		text, _ := wholeTokens(s, turn)
		whole, err := marshal(tokenizeRequest{Content: text, ParseSpecial: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d messages: /tokenize bytes per turn %d (whole text: %d)", n+2, bytesAfter-bytesBefore, len(whole))
		sizes = append(sizes, bytesAfter-bytesBefore)
	}
	if sizes[0] != sizes[1] {
		t.Fatalf("/tokenize bytes per turn %v grow with the history", sizes)
	}
}

// TestTokenizePiecesRecorded reads a /tokenize answer with pieces recorded
// from the August 2026 llama-server build serving kvwin's test model with
// the Llama 3 vocabulary (testdata/tokenize_pieces_llama3.*): pieces that
// are halves of an emoji come as byte arrays, and every token's end offset
// is established, the control tokens' included.
func TestTokenizePiecesRecorded(t *testing.T) {
	var req tokenizeRequest
	if err := json.Unmarshal(fixture("tokenize_pieces_llama3.request.json"), &req); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveFile(w, http.StatusOK, "tokenize_pieces_llama3.response.json")
	}))
	defer srv.Close()
	b, err := New(Config{BaseURL: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ids, ends, pieces, err := b.tokenizePieces(context.Background(), req.Content)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != len(ids) || ends[len(ends)-1] != len(req.Content) {
		t.Fatalf("offsets of %d of %d tokens, the last at %v; want all, the last at %d", len(ends), len(ids), ends[len(ends)-1:], len(req.Content))
	}
	var spelled []byte
	split := 0
	for i, p := range pieces {
		spelled = append(spelled, p...)
		if !utf8.Valid(p) {
			split++
		}
		if start := ends[i] - len(p); req.Content[start:ends[i]] != string(p) {
			t.Errorf("token %d (%d) at %d..%d is %q, its piece %q", i, ids[i], start, ends[i], req.Content[start:ends[i]], p)
		}
	}
	if string(spelled) != req.Content || split != 2 {
		t.Fatalf("pieces spell %q with %d byte-array pieces; want the text and the emoji's 2 halves", spelled, split)
	}
	if i := slices.Index(ids, 128007); i < 0 || req.Content[ends[i]-len("<|end_header_id|>"):ends[i]] != "<|end_header_id|>" {
		t.Fatalf("<|end_header_id|> (128007) not where its text is: %v", ids)
	}
}

// longHistory is a system prompt and n−1 alternating user and assistant
// messages with emoji, blank lines and code: a history of n messages.
func longHistory(n int) []engine.Message {
	history := []engine.Message{{Role: engine.RoleSystem, Content: "You are terse."}}
	for i := 1; i < n; i++ {
		role := engine.RoleUser
		if i%2 == 0 {
			role = engine.RoleAssistant
		}
		history = append(history, engine.Message{Role: role, Content: fmt.Sprintf("message %d: hello world, 😀 and\n\n  code {\t}", i)})
	}
	return history
}
