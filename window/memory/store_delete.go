package memory

import (
	"context"
	"time"

	"kvwin/engine/datadir"
)

// Delete removes every stored turn of key's conversation, every branch,
// and its in-memory state. It reports false when the store held nothing
// for key. Safe for concurrent use: an Ingest racing it either lands before
// (and is deleted) or after (and starts the conversation anew).
func (s *Store) Delete(ctx context.Context, key Key) (bool, error) {
	return s.deleteIf(ctx, key, time.Time{})
}

// Expire deletes the conversations not used since Now() - TTL and returns
// how many; with no TTL it does nothing. Each one deleted is passed to
// StoreConfig.Expired. Open and a background loop call it; it is exported
// for operators and tests.
func (s *Store) Expire(ctx context.Context) (int, error) {
	if s.cfg.TTL <= 0 {
		return 0, nil
	}
	if s.isClosed() {
		return 0, ErrClosed
	}
	cutoff := s.cfg.Now().Add(-s.cfg.TTL)
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, name FROM conversations WHERE used < ?`, cutoff.UnixNano())
	if err != nil {
		return 0, classify(s.path, err)
	}
	var keys []Key
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Tenant, &k.Conversation); err != nil {
			_ = rows.Close()
			return 0, classify(s.path, err)
		}
		keys = append(keys, k)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, classify(s.path, err)
	}
	n := 0
	for _, k := range keys {
		ok, err := s.deleteIf(ctx, k, cutoff)
		if err != nil {
			return n, err
		}
		if ok {
			n++
			if s.cfg.Expired != nil {
				s.cfg.Expired(k)
			}
		}
	}
	return n, nil
}

// deleteIf deletes key's conversation; with a non-zero cutoff only if it
// was last used before it (checked under the conversation's lock, so a use
// racing the expiry keeps it).
func (s *Store) deleteIf(ctx context.Context, key Key, cutoff time.Time) (ok bool, err error) {
	st, err := s.locked(ctx, key, false)
	if err != nil || st == nil {
		return false, err
	}
	defer st.mu.Unlock()
	if s.isClosed() {
		return false, ErrClosed
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, classify(s.path, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if !cutoff.IsZero() {
		var used int64
		if err := tx.QueryRowContext(ctx, `SELECT used FROM conversations WHERE id = ?`, st.id).Scan(&used); err != nil {
			return false, classify(s.path, err)
		}
		if used >= cutoff.UnixNano() {
			return false, tx.Rollback()
		}
	}
	stmts := []string{`DELETE FROM responses WHERE conv = ?`, `DELETE FROM turns WHERE conv = ?`, `DELETE FROM conversations WHERE id = ?`}
	var legacy int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'turns_v1'`).Scan(&legacy); err != nil {
		return false, classify(s.path, err)
	}
	if legacy > 0 {
		stmts = append([]string{`DELETE FROM turns_v1 WHERE conv = ?`}, stmts...)
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q, st.id); err != nil {
			return false, classify(s.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, classify(s.path, err)
	}
	st.gone = true
	st.branches = nil
	s.forget(key)
	s.resp.drop(st.id, "")
	return true, nil
}

// expireLoop runs Expire every datadir.SweepInterval of the TTL (a
// quarter of it, at most every hour) until Close. A failure is retried at
// the next tick; the store's other calls report the same condition to
// their callers.
func (s *Store) expireLoop() {
	defer s.done.Done()
	datadir.Sweep(s.stop, s.cfg.TTL, func() { _, _ = s.Expire(context.Background()) })
}
