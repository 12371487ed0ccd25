package toolcall

import (
	"container/list"
	"strings"
	"sync"

	"kvwin/engine"
)

// Answers remembers the text of the answers that called tools, per tenant,
// by what they mean (meaning.go), so that the turn after a tool call
// renders the call as the model wrote it, not as the client re-serialised
// it: the prompt then holds the generated tokens and the backend reuses
// their KV, and only the tool's result is computed.
//
// Invariants:
//   - an answer is recalled only for the tenant it was generated for (the
//     tenant is part of its meaning), so a client never gets another
//     tenant's text into its prompt, nor the KV computed for it;
//   - an assistant message is replaced only by a text that means the same
//     to the client (the same text before its calls, the same calls by
//     name and arguments by value): the model reads what it wrote, which is
//     what the client was told it wrote;
//   - at most maxBytes of text are held, the answers' and their aliases',
//     least recently used first out; a text over a sixteenth of that is
//     not held;
//   - an alias is a rendering of an answer's meaning a client sent (the
//     message's content, which it sends again every turn), found without
//     reading its JSON again: it names the answer its meaning named.
//
// What it buys is KV reuse, never correctness: an answer forgotten (a
// restart, another gateway replica, eviction) renders as the client sent
// it, as it would without Answers. Safe for concurrent use.
type Answers struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    *list.List // of *answer, most recently used first
	byMean   map[meaning]*list.Element
	byAlias  map[alias]*list.Element
}

type answer struct {
	mean    meaning
	text    string
	aliases []alias // naming it, at most maxAliases
}

// maxAliases bounds the renderings of one answer held: one per client
// serialisation in use, in practice one.
const maxAliases = 2

// alias names content as tenant's.
type alias struct{ tenant, content string }

func (k alias) size() int { return len(k.tenant) + len(k.content) }

// DefaultAnswerBytes bounds the text Answers holds when not told: 8 MiB,
// some tens of thousands of calls.
const DefaultAnswerBytes = 8 << 20

// NewAnswers returns Answers holding at most maxBytes of text
// (DefaultAnswerBytes when 0 or less).
func NewAnswers(maxBytes int) *Answers {
	if maxBytes <= 0 {
		maxBytes = DefaultAnswerBytes
	}
	return &Answers{maxBytes: maxBytes, order: list.New(), byMean: map[meaning]*list.Element{}, byAlias: map[alias]*list.Element{}}
}

// Remember keeps text, a generated answer, for tenant if it is text
// followed by whole tool calls; anything else is ignored. It keeps too
// the text up to the end of each call but the last, for a client told of
// the first calls only (parallel_tool_calls false): the backend holds the
// KV of every prefix of the answer.
func (a *Answers) Remember(tenant, text string) {
	if len(text) > a.maxBytes/16 || !strings.Contains(text, callMarker) {
		return
	}
	said, err := meaningsOf(tenant, text)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, sd := range said {
		if k == len(said)-1 {
			a.keep(sd.mean, text)
		} else {
			a.keep(sd.mean, text[:sd.end])
		}
	}
}

// keep holds text as meaning m, the most recently used. a.mu is held.
func (a *Answers) keep(m meaning, text string) {
	if el, ok := a.byMean[m]; ok {
		old := el.Value.(*answer)
		a.bytes += len(text) - len(old.text)
		old.text = text
		a.order.MoveToFront(el)
	} else {
		a.byMean[m] = a.order.PushFront(&answer{mean: m, text: text})
		a.bytes += len(text)
	}
	a.evict()
}

// evict drops the least recently used answers, with their aliases,
// until the bound holds. a.mu is held.
func (a *Answers) evict() {
	for a.bytes > a.maxBytes {
		gone := a.order.Remove(a.order.Back()).(*answer)
		delete(a.byMean, gone.mean)
		a.bytes -= len(gone.text)
		for _, k := range gone.aliases {
			delete(a.byAlias, k)
			a.bytes -= k.size()
		}
	}
}

// Recall returns msgs with every assistant message that means what an
// answer remembered for tenant means replaced by that answer's text, and
// how many it replaced. msgs is not modified; it is returned as it is
// when nothing is replaced.
func (a *Answers) Recall(tenant string, msgs []engine.Message) ([]engine.Message, int) {
	a.mu.Lock()
	empty := a.order.Len() == 0
	a.mu.Unlock()
	if empty {
		return msgs, 0
	}
	out, n := msgs, 0
	for i, m := range msgs {
		if m.Role != engine.RoleAssistant || !strings.Contains(m.Content, callMarker) {
			continue
		}
		text, ok := a.recall(tenant, m.Content)
		if !ok || text == m.Content {
			continue
		}
		if n == 0 {
			out = append([]engine.Message(nil), msgs...)
		}
		out[i].Content = text
		n++
	}
	return out, n
}

// recall is the remembered text meaning what content means for tenant.
// A content recalled before is found by its alias; another is read, and
// kept as an alias of the answer it means.
func (a *Answers) recall(tenant, content string) (string, bool) {
	key := alias{tenant, content}
	a.mu.Lock()
	if el, ok := a.byAlias[key]; ok {
		a.order.MoveToFront(el)
		text := el.Value.(*answer).text
		a.mu.Unlock()
		return text, true
	}
	a.mu.Unlock()
	m, err := meaningOf(tenant, content)
	if err != nil {
		return "", false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	el, ok := a.byMean[m]
	if !ok {
		return "", false
	}
	a.order.MoveToFront(el)
	ans := el.Value.(*answer)
	if _, held := a.byAlias[key]; !held && len(ans.aliases) < maxAliases && key.size() <= a.maxBytes/16 {
		ans.aliases = append(ans.aliases, key)
		a.byAlias[key] = el
		a.bytes += key.size()
		a.evict()
	}
	return ans.text, true
}
