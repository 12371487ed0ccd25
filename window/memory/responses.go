package memory

// Stored responses: the conversations the OpenAI Responses API asks the
// server to hold (store, previous_response_id). Each response is one row:
// its id, its conversation (a row of conversations, so the window's evicted
// turns, the TTL and Delete cover it with the rest of the conversation), the
// response it continues, and three JSON documents the store does not read:
// the request's input items, the messages the response adds to its chain
// (its input and its answer, as the model read and wrote them) and the
// response object. Two responses continuing the same one are two branches;
// each chain is the path from a response up through its previous ones.
//
// A chain is rebuilt every turn, so the messages of a conversation's rows
// are kept in memory once read (respCache): a turn reads its response's row
// by primary key and walks the chain in memory; the conversation's rows are
// read from the file only when it is not held (first use, after a restart),
// or when a response of it was deleted since they were read.
//
// Deletes through other replicas (a shared database): every DeleteResponse
// bumps its conversation's responses_deleted in the delete's transaction,
// and the one statement a turn reads its response's row with reads that
// count too. A held conversation whose count moved is read again before
// its chain is walked, so a delete committed through any replica before a
// turn reads its chain is honoured by that turn, at no round trip of its
// own. (A conversation's Delete removes its row and every response: the
// row read finds nothing.)
//
// The SQL is portable (placeholders, TEXT and INTEGER, no SQLite-only
// syntax) so that other engines of the store can run it as it is.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"kvwin/internal/lru"
	"slices"
	"sync"
	"time"
)

// responsesStep adds the stored responses (schema version 4 on both
// dialects). Input, messages and body are JSON documents as the API gave
// them; PostgreSQL keeps them as bytea (its text type refuses NUL and
// invalid UTF-8, which a stored byte string may hold).
func responsesStep(conv, blob, at string) step {
	return stmts(`
CREATE TABLE IF NOT EXISTS responses (
	id       TEXT PRIMARY KEY,
	conv     `+conv+` NOT NULL REFERENCES conversations (id),
	tenant   TEXT NOT NULL,
	previous TEXT NOT NULL,
	input    `+blob+` NOT NULL,
	messages `+blob+` NOT NULL,
	body     `+blob+` NOT NULL,
	at       `+at+` NOT NULL
)`, `CREATE INDEX IF NOT EXISTS responses_conv ON responses (conv)`)
}

// ErrResponseNotFound: the tenant has no stored response of that id (never
// had one, it was deleted, it expired, or it is another tenant's), or a
// response its chain passes through is gone.
var ErrResponseNotFound = errors.New("no such response")

// ErrChainBroken is wrapped, beside ErrResponseNotFound, when the response
// asked for is held but one its chain passes through is gone: a caller
// tells the two apart without reading the message.
var ErrChainBroken = errors.New("deleted")

// StoredResponse is one stored response. The store keeps Input, Messages
// and Body as they are given (JSON documents of the API that stores them).
type StoredResponse struct {
	ID string
	// Key is the response's owner and conversation.
	Key Key
	// Previous is the id of the response it continues; "" for a chain's
	// first.
	Previous string
	Input    []byte
	Messages []byte
	Body     []byte
	At       time.Time
}

// respCache holds, per conversation, the messages of its responses by id
// and the response each continues, bounded by their bytes (max,
// StoreConfig.ResponseBytes): the least recently continued conversations
// are read from the file again when next continued. Its own lock guards
// it; it is taken under no other of the store's locks and holds none.
type respCache struct {
	mu    sync.Mutex
	max   int64
	convs *lru.Map[int64, *respConv]
}

type respConv struct {
	// mu guards nodes: a response saved to a held conversation (add, under
	// the cache's lock) is set while another request may walk the same
	// conversation's chain (chain, outside it): a map read beside a write
	// is a fatal error, not a stale read.
	mu    sync.RWMutex
	nodes map[string]respNode
	// lastID's chain is last, the one chain returned most recently (a
	// response, once stored, never changes its chain: a delete drops the
	// whole conversation from the cache). Its slice headers, 24 bytes a
	// response (twice that at most, with the room append leaves past the
	// last: see chain), are not counted in bytes: at most half of
	// nodeBytes' least.
	lastMu sync.Mutex
	lastID string
	last   [][]byte
	// deleted is the conversation's responses_deleted read before nodes
	// were: while the row says the same, none of nodes was deleted.
	deleted int64
	bytes   int64 // Σ nodeBytes, kept by set and remove
}

// responsesDeletedColumn counts the responses of a conversation deleted one
// by one (DeleteResponse); held chains are checked against it.
const responsesDeletedColumn = "responses_deleted"

// nodeBytes is what one held response costs: its messages, its id and
// previous id, and the map entry holding them.
func nodeBytes(id string, n respNode) int64 {
	return int64(len(id)+len(n.previous)+len(n.messages)) + 96
}

func (rc *respConv) set(id string, n respNode) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if old, ok := rc.nodes[id]; ok {
		rc.bytes -= nodeBytes(id, old)
	}
	rc.nodes[id] = n
	rc.bytes += nodeBytes(id, n)
}

func respConvBytes(rc *respConv) int64 { return 64 + rc.bytes }

type respNode struct {
	previous string
	messages []byte
}

func (c *respCache) get(conv int64) (*respConv, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.convs == nil {
		return nil, false
	}
	return c.convs.Get(conv)
}

func (c *respCache) put(conv int64, rc *respConv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.convs == nil {
		c.convs = lru.New[int64, *respConv](cmp.Or(c.max, DefaultResponseBytes), respConvBytes)
	}
	c.convs.Put(conv, rc)
}

// add records a new response of a held conversation (one not held is read
// whole when it is next used).
func (c *respCache) add(conv int64, id string, n respNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.convs == nil {
		return
	}
	if rc, ok := c.convs.Get(conv); ok {
		rc.set(id, n)
		c.convs.Resize(conv)
	}
}

// drop forgets a conversation's responses: they are read again at its
// next use.
func (c *respCache) drop(conv int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.convs != nil {
		c.convs.Remove(conv)
	}
}

// SaveResponse stores r in its conversation (created if new), which counts
// as a use of the conversation for the TTL. The response it continues must
// be stored (ResponseChain found it); r.ID must be new.
func (s *Store) SaveResponse(ctx context.Context, r StoredResponse) error {
	return s.bounded(ctx, func(ctx context.Context) error { return s.saveResponse(ctx, r) })
}

func (s *Store) saveResponse(ctx context.Context, r StoredResponse) error {
	st, err := s.locked(ctx, r.Key, true)
	if err != nil {
		return err
	}
	defer st.mu.Unlock()
	at := r.At
	if at.IsZero() {
		at = s.cfg.Now()
	}
	defer s.writeLock()()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO responses (id, conv, tenant, previous, input, messages, body, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, st.id, r.Key.Tenant, r.Previous, s.d.text(string(r.Input)), s.d.text(string(r.Messages)), s.d.text(string(r.Body)), at.UnixNano()); err != nil {
		return s.classify(fmt.Errorf("save response: %w", err))
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE conversations SET used = ? WHERE id = ?`), s.cfg.Now().UnixNano(), st.id); err != nil {
		return s.classify(err)
	}
	if err := tx.Commit(); err != nil {
		return s.classify(err)
	}
	s.resp.add(st.id, r.ID, respNode{previous: r.Previous, messages: r.Messages})
	return nil
}

// Response returns tenant's stored response id, wrapping
// ErrResponseNotFound when it has none.
func (s *Store) Response(ctx context.Context, tenant, id string) (r StoredResponse, err error) {
	err = s.retry(ctx, func(ctx context.Context) (err error) { r, err = s.response(ctx, tenant, id); return err })
	return r, err
}

func (s *Store) response(ctx context.Context, tenant, id string) (StoredResponse, error) {
	if err := s.usable(); err != nil {
		return StoredResponse{}, err
	}
	r := StoredResponse{ID: id, Key: Key{Tenant: tenant}}
	var input, messages, body string
	var at int64
	err := s.db.QueryRowContext(ctx, s.d.rebind(`SELECT c.name, r.previous, r.input, r.messages, r.body, r.at FROM responses r JOIN conversations c ON c.id = r.conv WHERE r.id = ? AND r.tenant = ?`),
		id, tenant).Scan(&r.Key.Conversation, &r.Previous, &input, &messages, &body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: %q", ErrResponseNotFound, id)
	}
	if err != nil {
		return r, s.classify(err)
	}
	r.Input, r.Messages, r.Body, r.At = []byte(input), []byte(messages), []byte(body), time.Unix(0, at)
	return r, nil
}

// ResponseChain returns the conversation of tenant's stored response id and
// the Messages of its chain, first response first, id's last. It reads one
// row from the file while the conversation is held in memory.
func (s *Store) ResponseChain(ctx context.Context, tenant, id string) (key Key, chain [][]byte, err error) {
	err = s.retry(ctx, func(ctx context.Context) (err error) { key, chain, err = s.responseChain(ctx, tenant, id); return err })
	return key, chain, err
}

func (s *Store) responseChain(ctx context.Context, tenant, id string) (Key, [][]byte, error) {
	if err := s.usable(); err != nil {
		return Key{}, nil, err
	}
	key := Key{Tenant: tenant}
	var conv, deleted int64
	err := s.db.QueryRowContext(ctx, s.d.rebind(`SELECT r.conv, c.name, c.`+responsesDeletedColumn+` FROM responses r JOIN conversations c ON c.id = r.conv WHERE r.id = ? AND r.tenant = ?`),
		id, tenant).Scan(&conv, &key.Conversation, &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return key, nil, fmt.Errorf("%w: %q", ErrResponseNotFound, id)
	}
	if err != nil {
		return key, nil, s.classify(err)
	}
	if rc, ok := s.resp.get(conv); ok && rc.deleted == deleted {
		if chain, ok := rc.chain(id); ok {
			return key, chain, nil
		}
	}
	// Not held, held from before a delete (through any replica), or held
	// without a response saved while it was being read: read the
	// conversation's rows again.
	rc, err := s.loadResponses(ctx, conv)
	if err != nil {
		return key, nil, err
	}
	rc.deleted = deleted // read before the rows: a delete between the two is seen at the next use
	s.resp.put(conv, rc)
	chain, ok := rc.chain(id)
	if !ok {
		return key, nil, fmt.Errorf("%w: a response the chain of %q continues was %w", ErrResponseNotFound, id, ErrChainBroken)
	}
	return key, chain, nil
}

// chain walks from id up through the responses it continues. A chain
// goes on one response a turn, so the walk starts from the chain it last
// returned when id continues it (or is it): a 2,000-turn chain's walk was
// 2,000 map reads every turn. That chain is extended in place: last is the
// longest of the chains returned from its array, and only this appends to
// it (under lastMu), past every one returned, so a turn costs one slice
// header, not a copy of 2,000 (append's doubling aside). The slice
// returned is shared: callers only read it.
func (rc *respConv) chain(id string) ([][]byte, bool) {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	n, ok := rc.nodes[id]
	if !ok {
		return nil, false
	}
	rc.lastMu.Lock()
	defer rc.lastMu.Unlock()
	var out [][]byte
	switch {
	case id == rc.lastID:
		return slices.Clip(rc.last), true
	case rc.lastID != "" && n.previous == rc.lastID:
		out = append(rc.last, n.messages)
	default:
		var rev [][]byte
		for cur := id; cur != ""; {
			n, ok := rc.nodes[cur]
			if !ok || len(rev) > len(rc.nodes) {
				return nil, false
			}
			rev = append(rev, n.messages)
			cur = n.previous
		}
		out = make([][]byte, len(rev))
		for i, m := range rev {
			out[len(rev)-1-i] = m
		}
	}
	rc.lastID, rc.last = id, out
	return slices.Clip(out), true
}

// loadResponses reads the responses of conversation conv.
func (s *Store) loadResponses(ctx context.Context, conv int64) (*respConv, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT id, previous, messages FROM responses WHERE conv = ?`), conv)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	rc := &respConv{nodes: map[string]respNode{}}
	for rows.Next() {
		var id, prev, msgs string
		if err := rows.Scan(&id, &prev, &msgs); err != nil {
			return nil, s.classify(err)
		}
		rc.set(id, respNode{previous: prev, messages: []byte(msgs)})
	}
	return rc, s.classify(rows.Err())
}

// DeleteResponse deletes tenant's stored response id and reports whether
// there was one. Responses continuing it can no longer be continued,
// through this process or any other sharing the database (see
// responsesDeletedColumn).
func (s *Store) DeleteResponse(ctx context.Context, tenant, id string) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	var conv int64
	err := s.bounded(ctx, func(ctx context.Context) (err error) { conv, err = s.deleteResponse(ctx, tenant, id); return err })
	if err != nil || conv == 0 {
		return false, err
	}
	s.resp.drop(conv) // read again at its next use, as another replica does
	return true, nil
}

// deleteResponse deletes the row and bumps its conversation's count of
// deleted responses in one transaction; it returns the conversation, 0 if
// there was no such response.
func (s *Store) deleteResponse(ctx context.Context, tenant, id string) (conv int64, err error) {
	defer s.writeLock()()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.classify(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	err = tx.QueryRowContext(ctx, s.d.rebind(`DELETE FROM responses WHERE id = ? AND tenant = ? RETURNING conv`), id, tenant).Scan(&conv)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.classify(err)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE conversations SET `+responsesDeletedColumn+` = `+responsesDeletedColumn+` + 1 WHERE id = ?`), conv); err != nil {
		return 0, s.classify(err)
	}
	return conv, s.classify(tx.Commit())
}
