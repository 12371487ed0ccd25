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
// they were decoded from.
type chainHistory struct {
	docs int
	msgs []engine.Message
}

func newChainMemo() *chainMemo {
	return &chainMemo{m: lru.New[chainKey](chainMemoBytes, historyBytes)}
}

// historyBytes estimates what a history holds: its messages' text and a
// message's fixed part.
func historyBytes(h chainHistory) int64 {
	n := int64(64)
	for _, m := range h.msgs {
		n += int64(len(m.Content)+len(m.Role)) + 128
	}
	return n
}

// decode returns the messages of docs, the chain of tenant's response id:
// from the memo when it holds that chain, else decoded and kept. The
// caller owns the returned slice.
func (c *chainMemo) decode(tenant, id string, docs [][]byte) ([]engine.Message, error) {
	k := chainKey{tenant, id}
	c.mu.Lock()
	h, ok := c.m.Get(k)
	c.mu.Unlock()
	if ok && h.docs == len(docs) {
		return slices.Clone(h.msgs), nil
	}
	var history []engine.Message
	for _, d := range docs {
		var msgs []engine.Message
		if err := json.Unmarshal(d, &msgs); err != nil {
			return nil, fmt.Errorf("stored response of the chain of %q does not decode: %w", id, err)
		}
		history = append(history, msgs...)
	}
	c.put(k, chainHistory{docs: len(docs), msgs: slices.Clone(history)})
	return history, nil
}

// saved records that tenant's response id continues the chain whose
// history (of docs stored responses) was read with added: what it stores.
func (c *chainMemo) saved(tenant, id string, docs int, history, added []engine.Message) {
	c.put(chainKey{tenant, id}, chainHistory{docs: docs + 1, msgs: append(slices.Clone(history), added...)})
}

func (c *chainMemo) put(k chainKey, h chainHistory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.Put(k, h)
}
