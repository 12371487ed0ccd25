package memory

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Ingest stores turns of key's conversation and returns how many were new.
// Positions already stored are skipped (clients resend whole histories), so
// ingesting the same turns twice stores them once. When it returns nil every
// turn is durable. It blocks on disk; safe for concurrent use.
func (s *Store) Ingest(ctx context.Context, key Key, turns []Turn) (int, error) {
	if len(turns) == 0 {
		return 0, nil
	}
	st, err := s.state(ctx, key, true)
	if err != nil {
		return 0, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var fresh []Turn
	seen := map[int]bool{}
	for _, t := range turns {
		if st.has(t.Pos) || seen[t.Pos] {
			continue
		}
		seen[t.Pos] = true
		fresh = append(fresh, withHandle(t))
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	if err := s.insert(ctx, st.id, fresh); err != nil {
		return 0, err
	}
	st.add(fresh)
	return len(fresh), nil
}

func (s *Store) insert(ctx context.Context, conv int64, turns []Turn) (err error) {
	if s.isClosed() {
		return ErrClosed
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(s.path, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO turns (conv, pos, role, text, handle, at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (conv, pos) DO NOTHING`)
	if err != nil {
		return classify(s.path, err)
	}
	defer ins.Close()
	fts, err := tx.PrepareContext(ctx, `INSERT INTO turns_fts (rowid, conv, words) VALUES (?, ?, ?)`)
	if err != nil {
		return classify(s.path, err)
	}
	defer fts.Close()
	now := s.cfg.Now().UnixNano()
	convTok := convToken(conv)
	for _, t := range turns {
		res, err := ins.ExecContext(ctx, conv, t.Pos, t.Role, t.Text, t.Handle, now)
		if err != nil {
			return classify(s.path, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // stored by another process or an earlier crash's commit
		}
		id, err := res.LastInsertId()
		if err != nil {
			return classify(s.path, err)
		}
		if _, err := fts.ExecContext(ctx, id, convTok, t.Text); err != nil {
			return classify(s.path, err)
		}
	}
	return classify(s.path, tx.Commit())
}

// convToken is the FTS term that scopes a match to one conversation.
func convToken(id int64) string { return fmt.Sprintf("c%d", id) }

// Turns returns every stored turn of key's conversation in position order.
func (s *Store) Turns(ctx context.Context, key Key) ([]Turn, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	id, err := s.convID(ctx, key, false)
	if err != nil || id == 0 {
		return nil, err
	}
	return s.load(ctx, id)
}

func scanTurn(rows *sql.Rows) (Turn, error) {
	var t Turn
	var at int64
	err := rows.Scan(&t.Pos, &t.Role, &t.Text, &t.Handle, &at)
	t.Time = time.Unix(0, at)
	return t, err
}
