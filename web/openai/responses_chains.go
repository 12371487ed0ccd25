package openai

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"kvwin/engine"
	"kvwin/internal/lru"
)

// chainMemoBytes bounds the decoded chains a server keeps, by the bytes of
// their messages. The rule: a 2,000-turn chain's history is a few MB (as
// the store's own DefaultResponseBytes counts it), and a few active chains
// continuing at once fit; a chain that does not is decoded again, as
// before.
const chainMemoBytes = 16 << 20

// chainMemo keeps the decoded history of a chain by its last response, so
// a turn that continues it decodes nothing: a response's chain never
// changes once it is saved (ids are never reused; a delete makes the
// store's ResponseChain fail, which is read first every turn), and the
// response a turn saves is its chain's history plus what it added. Keyed
// by tenant as well, so one tenant's turns never touch another's entries.
// Safe for concurrent use.
type chainMemo struct {
	mu sync.Mutex
	m  *lru.Map[chainKey, chainHistory]
}

type chainKey struct{ tenant, id string }

// chainHistory is a chain's messages and the number of stored responses
// they were decoded from. msgs is a prefix of log's, which never changes
// once written. The zero value is the empty history of a turn that
// continues no response.
type chainHistory struct {
	docs  int
	log   *chainLog
	msgs  []engine.Message // clipped: an append never reaches log's array
	bytes int64            // historyBytes's figure, summed as the chain grew
}

// chainLog holds the histories of a chain that grows by one response a
// turn in one array: a history is a prefix of msgs, whose messages never
// change once written, so the response a turn saves extends its history
// in place (append's doubling: a copy now and then, not one a turn). A
// 2,000-turn chain's turn copied its history three times, 4,000 messages
// each. A history that is continued twice (a branch, a retry) is copied
// into a log of its own at its second continuation.
type chainLog struct {
	mu   sync.Mutex
	msgs []engine.Message
}

// messages returns h's messages. They are shared with the memo and the
// chains that continue h: the caller only reads them.
func (h chainHistory) messages() []engine.Message { return h.msgs }

// extended returns h continued by one stored response adding added: in
// h's log where h is its longest history, else in a copy.
func (h chainHistory) extended(added []engine.Message) chainHistory {
	next := chainHistory{docs: h.docs + 1, bytes: h.bytes + messagesBytes(added)}
	if l := h.log; l != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.msgs) == len(h.msgs) {
			l.msgs = append(l.msgs, added...)
			next.log, next.msgs = l, slices.Clip(l.msgs)
			return next
		}
	}
	n := len(h.msgs) + len(added)
	next.log = &chainLog{msgs: append(append(make([]engine.Message, 0, n+n/4+8), h.msgs...), added...)}
	next.msgs = slices.Clip(next.log.msgs)
	return next
}

func newChainMemo() *chainMemo {
	return &chainMemo{m: lru.New[chainKey](chainMemoBytes, historyBytes)}
}

// historyBytes estimates what a history holds: its messages' text and a
// message's fixed part.
func historyBytes(h chainHistory) int64 { return 64 + h.bytes }

// messagesBytes is what historyBytes counts of msgs.
func messagesBytes(msgs []engine.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Content)+len(m.Role)) + 128
	}
	return n
}

// decode returns the history of docs, the chain of tenant's response id:
// from the memo when it holds that chain, else decoded and kept. Its
// messages are shared (chainHistory.messages): the caller only reads them.
func (c *chainMemo) decode(tenant, id string, docs [][]byte) (chainHistory, error) {
	k := chainKey{tenant, id}
	c.mu.Lock()
	h, ok := c.m.Get(k)
	c.mu.Unlock()
	if ok && h.docs == len(docs) {
		return h, nil
	}
	var history []engine.Message
	for _, d := range docs {
		var msgs []engine.Message
		if err := json.Unmarshal(d, &msgs); err != nil {
			return chainHistory{}, fmt.Errorf("stored response of the chain of %q does not decode: %w", id, err)
		}
		history = append(history, msgs...)
	}
	h = chainHistory{docs: len(docs), log: &chainLog{msgs: history}, msgs: slices.Clip(history), bytes: messagesBytes(history)}
	c.put(k, h)
	return h, nil
}

// saved records that tenant's response id continues the chain history
// with added: what it stores.
func (c *chainMemo) saved(tenant, id string, history chainHistory, added []engine.Message) {
	c.put(chainKey{tenant, id}, history.extended(added))
}

func (c *chainMemo) put(k chainKey, h chainHistory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.Put(k, h)
}
