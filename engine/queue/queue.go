// Package queue orders the requests waiting for a backend's slot: by
// priority class, then by fair share between tenants (deficit round-robin
// over tokens). docs/tenants.md, "Priority and fair shares", says why.
package queue

import (
	"fmt"
	"math"
)

// The queue's rules (its invariants):
//
//   - Class: a waiting Interactive request is taken before any Batch one,
//     except that after BatchEvery Interactive requests in a row were taken
//     while a Batch request waited, the next taken is Batch (the starvation
//     bound). A Batch request takes only a slot its caller offers as spare
//     (Pop's spare) unless that bound has come due; a caller whose slots
//     are serving a Batch request already takes only Interactive ones for
//     the slots it keeps (PopInteractive): Batch is not starving then.
//   - Fair share, within a class: tenants take turns by deficit round-robin
//     (Shreedhar and Varghese, 1995) over tokens. Each visit in a round
//     credits a tenant Quantum × weight tokens; it is served while its next
//     request's cost fits its credit; a tenant with nothing waiting keeps
//     no credit. Over a backlog, the tokens each tenant is served are in
//     proportion to its weight, within one request's cost.
//   - A tenant's own requests keep their arrival order.
//   - FIFO (Config.FIFO) ignores classes, tenants and spare: arrival order,
//     as before classes existed, for comparison.

// Config configures a Queue. The zero value means the defaults.
type Config struct {
	// Quantum is the tokens a tenant of weight 1 is credited per round;
	// default DefaultQuantum.
	Quantum int
	// BatchEvery is the starvation bound: after this many Interactive
	// requests were taken in a row while a Batch one waited, a Batch one is
	// taken next; default DefaultBatchEvery.
	BatchEvery int
	// FIFO takes requests in arrival order whatever their class or tenant.
	FIFO bool
}

// Defaults.
const (
	// DefaultQuantum is about one short chat turn (prompt and answer), so
	// a round serves each backlogged tenant about one request.
	DefaultQuantum = 1024
	// DefaultBatchEvery lets one batch request through after 8
	// interactive ones while it waits.
	DefaultBatchEvery = 8
	// MinWeight and MaxWeight bound a tenant's weight.
	MinWeight, MaxWeight = 0.01, 100.0
)

// Key is what the queue orders a request by.
type Key struct {
	Class  Class
	Tenant string
	// Weight is the tenant's share relative to others of its class (1 when
	// 0); the latest request's weight is its tenant's.
	Weight float64
	// Cost is the tokens the request may take: its prompt plus the most it
	// may generate.
	Cost int
}

// CheckWeight reports whether w is a weight a tenant may have.
func CheckWeight(w float64) error {
	if math.IsNaN(w) || w < MinWeight || w > MaxWeight {
		return fmt.Errorf("weight %v: want %v to %v", w, MinWeight, MaxWeight)
	}
	return nil
}

// Queue holds waiting values of T. It is not safe for concurrent use: its
// one owner (the engine's run loop) calls it.
type Queue[T any] struct {
	cfg     Config
	fifo    []T
	classes [classes]*rounds[T]
	// streak counts Interactive requests taken in a row while a Batch one
	// waited.
	streak int
	n      int
}

// New returns an empty queue. It panics on a negative Quantum or
// BatchEvery: a programming error, configuration is checked before.
func New[T any](cfg Config) *Queue[T] {
	if cfg.Quantum < 0 || cfg.BatchEvery < 0 {
		panic(fmt.Sprintf("queue: quantum %d, batch every %d: must not be negative", cfg.Quantum, cfg.BatchEvery))
	}
	if cfg.Quantum == 0 {
		cfg.Quantum = DefaultQuantum
	}
	if cfg.BatchEvery == 0 {
		cfg.BatchEvery = DefaultBatchEvery
	}
	q := &Queue[T]{cfg: cfg}
	for c := range q.classes {
		q.classes[c] = &rounds[T]{quantum: float64(cfg.Quantum), flows: map[string]*flow[T]{}}
	}
	return q
}

// PopInteractive takes the next Interactive value (FIFO: the next value),
// or reports that none waits: the slot on offer is kept for interactive
// requests and a Batch request is being served elsewhere, so the
// starvation bound does not apply.
func (q *Queue[T]) PopInteractive() (T, bool) {
	if q.cfg.FIFO {
		return q.Pop(false) // arrival order, whatever the class
	}
	var zero T
	inter := q.classes[Interactive]
	if inter.len() == 0 {
		return zero, false
	}
	if q.classes[Batch].len() > 0 {
		q.streak++
	}
	q.n--
	return inter.pop(), true
}

// Len returns how many values wait.
func (q *Queue[T]) Len() int { return q.n }

// Push adds v, waiting under k.
func (q *Queue[T]) Push(v T, k Key) {
	q.n++
	if q.cfg.FIFO {
		q.fifo = append(q.fifo, v)
		return
	}
	c := k.Class
	if int(c) >= classes {
		c = Batch
	}
	q.classes[c].push(v, k)
}

// Pop takes the next value, or reports that none may go now. spare says
// whether the slot on offer is beyond what is kept for interactive
// requests: without it a Batch request goes only when the starvation
// bound is due.
func (q *Queue[T]) Pop(spare bool) (T, bool) {
	var zero T
	if q.cfg.FIFO {
		if len(q.fifo) == 0 {
			return zero, false
		}
		v := q.fifo[0]
		q.fifo[0] = zero
		q.fifo = q.fifo[1:]
		q.n--
		return v, true
	}
	inter, batch := q.classes[Interactive], q.classes[Batch]
	due := batch.len() > 0 && q.streak >= q.cfg.BatchEvery
	switch {
	case inter.len() > 0 && !due:
		if batch.len() > 0 {
			q.streak++
		}
		q.n--
		return inter.pop(), true
	case batch.len() > 0 && (spare || due):
		q.streak = 0
		q.n--
		return batch.pop(), true
	}
	return zero, false
}

// Remove takes every value drop reports true for out of the queue and
// returns them; the others keep their places.
func (q *Queue[T]) Remove(drop func(T) bool) []T {
	var out []T
	if q.cfg.FIFO {
		kept := q.fifo[:0]
		for _, v := range q.fifo {
			if drop(v) {
				out = append(out, v)
			} else {
				kept = append(kept, v)
			}
		}
		clear(q.fifo[len(kept):])
		q.fifo = kept
	} else {
		for _, r := range q.classes {
			out = append(out, r.remove(drop)...)
		}
	}
	q.n -= len(out)
	if q.classes[Batch].len() == 0 {
		q.streak = 0
	}
	return out
}
