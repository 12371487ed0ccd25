package memory

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"
)

// Ingest stores turns of key's conversation and returns how many were new.
// Each turn is filed under its chain (Turn.Parent must be the chain of the
// history before it; see Linked): a turn already stored on the same chain
// is skipped (clients resend whole histories), and a turn that disagrees
// with a stored one at its position starts a branch of its own beside it.
// When it returns nil every turn is durable. It blocks on disk; safe for
// concurrent use.
func (s *Store) Ingest(ctx context.Context, key Key, turns []Turn) (int, error) {
	n, _, err := s.ingestRetried(ctx, key, turns, false)
	return n, err
}

// IngestAfter is Ingest for the turns after those an earlier Ingest of the
// same history stored, turns[0] the last of those: a window sends every
// evicted turn of a long history each turn, and this lets it send only the
// new ones. The store holds every turn before turns[0] if it still holds
// turns[0] on its chain (a turn's chain covers the turns before it); then
// it stores the rest as Ingest would and reports true. Otherwise (the
// conversation was deleted, or its branch is not in memory) it stores
// nothing and reports false, and the caller ingests the whole history.
func (s *Store) IngestAfter(ctx context.Context, key Key, turns []Turn) (n int, held bool, err error) {
	return s.ingestRetried(ctx, key, turns, true)
}

// ingestRetried is ingest retried as the store retries, counted as its
// failures are; held is false when after and the first turn is not held
// (errNotHeld, no failure).
func (s *Store) ingestRetried(ctx context.Context, key Key, turns []Turn, after bool) (n int, held bool, err error) {
	err = s.retry(ctx, func(ctx context.Context) (err error) {
		n, err = s.ingest(ctx, key, turns, after)
		if errors.Is(err, errGone) {
			// Another process deleted the conversation between our check and
			// our write: this history starts it anew.
			n, err = s.ingest(ctx, key, turns, after)
		}
		if held = !errors.Is(err, errNotHeld); !held {
			return nil
		}
		return err
	})
	s.count(ctx, err)
	if err != nil && ctx.Err() == nil {
		s.unstored.Add(int64(len(turns)))
	}
	return n, held && err == nil, err
}

// errNotHeld: IngestAfter's first turn is not held, so the turns before it
// may not be either.
var errNotHeld = errors.New("the first turn of the batch is not held")

// errGone: the conversation's row went (deleted by another process) while
// a write was about to extend it.
var errGone = errors.New("conversation deleted meanwhile")

// ingest stores turns (see Ingest); after: they follow turns stored before,
// the first of them among those (see IngestAfter).
func (s *Store) ingest(ctx context.Context, key Key, turns []Turn, after bool) (int, error) {
	if len(turns) == 0 {
		return 0, nil
	}
	batch := inPositions(turns)
	if len(batch) == 0 {
		return 0, nil
	}
	// A turn's chain is read only where a check needs it (the latest turns,
	// a branch's tip): it hashes the turn's text, and a window sends every
	// evicted turn of a long history each turn.
	chain := func(pos int) (uint64, bool) {
		if i, ok := slices.BinarySearchFunc(batch, pos, func(t Turn, p int) int { return cmp.Compare(t.Pos, p) }); ok {
			return batch[i].Chain(), true
		}
		if pos >= 0 && pos == batch[0].Pos-1 {
			return batch[0].Parent, true // the batch continues the history before it
		}
		return 0, false
	}
	st, err := s.locked(ctx, key, !after)
	if err != nil {
		return 0, err
	}
	if st == nil {
		return 0, errNotHeld // after, and no such conversation
	}
	defer s.unlock(key, st)
	if after && !st.holds(batch[0].Pos, batch[0].Chain()) {
		return 0, errNotHeld
	}
	// Clients resend whole histories: what a held branch already has needs
	// no write (and no fsync) at all. A turn's chain covers every turn
	// before it, so the turns held are those up to the latest one held.
	var fresh []Turn
	for i := len(batch) - 1; i >= 0 && !st.holds(batch[i].Pos, batch[i].Chain()); i-- {
		fresh = append(fresh, withHandle(batch[i]))
	}
	slices.Reverse(fresh)
	if len(fresh) == 0 {
		return 0, s.touch(ctx, st)
	}
	now := s.cfg.Now()
	n, rev, err := s.insert(ctx, st.id, fresh, now)
	if errors.Is(err, errGone) {
		st.gone, st.branches = true, nil
		s.forget(key)
	}
	if err != nil {
		return 0, err
	}
	st.used = now
	if rev == st.rev+1 {
		st.rev = rev // no other process wrote meanwhile: the branches below are all there is
	}

	// Extend the branch this history continues, or start one.
	hi := batch[len(batch)-1].Pos
	for _, x := range st.branches {
		tip, ok := x.highest(0)
		if !ok || tip.Pos > hi || !onChain(x, chain, 0) {
			continue
		}
		var fresh []Turn
		for _, t := range batch {
			if t.Pos > tip.Pos {
				t.Time = now
				fresh = append(fresh, withHandle(t))
			}
		}
		x.Add(fresh...)
		st.branch(chain, hi+1) // to the front
		return n, nil
	}
	x, err := s.loadBranch(ctx, st.id, chain, hi+1)
	if err != nil {
		return 0, err
	}
	st.keep(x)
	return n, nil
}

// inPositions returns turns in ascending position, one per position (the
// first given wins) and none below 0: turns itself when it is so already,
// as a window's evicted turns are.
func inPositions(turns []Turn) []Turn {
	strict := len(turns) > 0 && turns[0].Pos >= 0
	for i := 1; i < len(turns) && strict; i++ {
		strict = turns[i].Pos > turns[i-1].Pos
	}
	if strict {
		return turns
	}
	batch := make([]Turn, 0, len(turns))
	seen := make(map[int]bool, len(turns))
	for _, t := range turns {
		if seen[t.Pos] || t.Pos < 0 {
			continue // one history holds one turn per position
		}
		seen[t.Pos] = true
		batch = append(batch, t)
	}
	slices.SortStableFunc(batch, func(a, b Turn) int { return cmp.Compare(a.Pos, b.Pos) })
	return batch
}

func (s *Store) insert(ctx context.Context, conv int64, turns []Turn, now time.Time) (n int, rev int64, err error) {
	if s.isClosed() {
		return 0, 0, ErrClosed
	}
	defer s.writeLock()()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, s.classify(err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	at := now.UnixNano()
	// The conversation's row first: its lock orders the writers of one
	// conversation (PostgreSQL), and its rev tells the other processes
	// that it grew.
	err = tx.QueryRowContext(ctx, s.d.rebind(`UPDATE conversations SET used = ?, rev = rev + 1 WHERE id = ? RETURNING rev`), at, conv).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, errGone
	}
	if err != nil {
		return 0, 0, s.classify(err)
	}
	ins, err := tx.PrepareContext(ctx, s.d.rebind(`INSERT INTO turns (conv, pos, chain, parent, role, text, handle, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conv, pos, chain) DO NOTHING`))
	if err != nil {
		return 0, 0, s.classify(err)
	}
	defer ins.Close()
	for _, t := range turns {
		res, err := ins.ExecContext(ctx, conv, t.Pos, int64(t.Chain()), int64(t.Parent), t.Role, s.d.text(t.Text), t.Handle, at)
		if err != nil {
			return 0, 0, s.classify(err)
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
	}
	return n, rev, s.classify(tx.Commit())
}

// Turns returns every stored turn of key's conversation, every branch, in
// position order.
func (s *Store) Turns(ctx context.Context, key Key) (out []Turn, err error) {
	err = s.retry(ctx, func(ctx context.Context) (err error) { out, err = s.turns(ctx, key); return err })
	return out, err
}

func (s *Store) turns(ctx context.Context, key Key) ([]Turn, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	id, _, err := s.convID(ctx, key, false)
	if err != nil || id == 0 {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT pos, role, text, handle, at, parent, chain FROM turns WHERE conv = ? ORDER BY pos, id`), id)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []Turn
	for rows.Next() {
		t, _, err := scanChained(rows)
		if err != nil {
			return nil, s.classify(err)
		}
		out = append(out, t)
	}
	return out, s.classify(rows.Err())
}

// scanChained reads one turn row and its stored chain.
func scanChained(rows *sql.Rows) (Turn, uint64, error) {
	var t Turn
	var at, parent, chain int64
	err := rows.Scan(&t.Pos, &t.Role, &t.Text, &t.Handle, &at, &parent, &chain)
	t.Time = time.Unix(0, at)
	t.Parent = uint64(parent)
	return t, uint64(chain), err
}
