package memory

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"kvwin/internal/datadir"
)

// Delete removes every stored turn of key's conversation, every branch,
// and its in-memory state. It reports false when the store held nothing
// for key. Safe for concurrent use: an Ingest racing it either lands before
// (and is deleted) or after (and starts the conversation anew).
func (s *Store) Delete(ctx context.Context, key Key) (ok bool, err error) {
	err = s.retry(ctx, func(ctx context.Context) (err error) { ok, err = s.deleteIf(ctx, key, time.Time{}); return err })
	return ok, err
}

// Expire deletes the conversations not used since Now() - TTL and returns
// how many; with no TTL it does nothing. Each one deleted is passed to
// StoreConfig.Expired. Open and a background loop call it; it is exported
// for operators and tests.
func (s *Store) Expire(ctx context.Context) (n int, err error) {
	if s.cfg.TTL <= 0 {
		return 0, nil
	}
	cutoff := s.cfg.Now().Add(-s.cfg.TTL)
	var keys []Key
	if err := s.retry(ctx, func(ctx context.Context) (err error) { keys, err = s.idle(ctx, cutoff); return err }); err != nil {
		return 0, err
	}
	// One call per conversation, each under its own deadline: a sweep of
	// many is as long as it needs to be; a database that stops answering
	// ends it at the next one.
	for _, k := range keys {
		var ok bool
		err := s.retry(ctx, func(ctx context.Context) (err error) { ok, err = s.deleteIf(ctx, k, cutoff); return err })
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

// idle lists the conversations last used before cutoff.
func (s *Store) idle(ctx context.Context, cutoff time.Time) ([]Key, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT tenant, name FROM conversations WHERE used < ?`), cutoff.UnixNano())
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var keys []Key
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Tenant, &k.Conversation); err != nil {
			return nil, s.classify(err)
		}
		keys = append(keys, k)
	}
	return keys, s.classify(rows.Err())
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
	defer s.writeLock()()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, s.classify(err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// Lock the row (PostgreSQL): an ingest through another replica waits,
	// then finds it gone and starts the conversation anew.
	var used int64
	err = tx.QueryRowContext(ctx, s.d.rebind(`SELECT used FROM conversations WHERE id = ?`+s.d.forUpdate), st.id).Scan(&used)
	if errors.Is(err, sql.ErrNoRows) {
		// Another process deleted it first: there is nothing to delete.
		st.gone, st.branches = true, nil
		s.forget(key)
		return false, tx.Rollback()
	}
	if err != nil {
		return false, s.classify(err)
	}
	if !cutoff.IsZero() && used >= cutoff.UnixNano() {
		return false, tx.Rollback()
	}
	if s.d.dropLegacy != nil {
		if err := s.d.dropLegacy(ctx, tx, st.id); err != nil {
			return false, s.classify(err)
		}
	}
	for _, q := range []string{`DELETE FROM responses WHERE conv = ?`, `DELETE FROM turns WHERE conv = ?`, `DELETE FROM conversations WHERE id = ?`} {
		if _, err := tx.ExecContext(ctx, s.d.rebind(q), st.id); err != nil {
			return false, s.classify(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, s.classify(err)
	}
	st.gone = true
	st.branches = nil
	s.forget(key)
	s.resp.drop(st.id)
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
