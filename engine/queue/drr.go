package queue

import "math"

// rounds is one class's deficit round-robin over its tenants' flows.
// Invariants: ring holds exactly the flows with a waiting value, each once,
// and flows maps their tenants to them; a flow leaving the ring loses its
// credit; cur indexes ring (0 when it is empty).
type rounds[T any] struct {
	quantum float64
	flows   map[string]*flow[T]
	ring    []*flow[T]
	cur     int
	n       int
}

// flow is one tenant's waiting values, in arrival order.
type flow[T any] struct {
	tenant  string
	weight  float64
	items   []item[T]
	deficit float64 // tokens credited and not yet spent
	// credited: this visit's quantum was added (a visit lasts while the
	// flow is served, across calls to pop).
	credited bool
}

type item[T any] struct {
	v    T
	cost float64
}

func (r *rounds[T]) len() int { return r.n }

func (r *rounds[T]) push(v T, k Key) {
	w := k.Weight
	if w == 0 || math.IsNaN(w) {
		w = 1
	}
	w = min(max(w, MinWeight), MaxWeight)
	f := r.flows[k.Tenant]
	if f == nil {
		f = &flow[T]{tenant: k.Tenant}
		r.flows[k.Tenant] = f
		r.ring = append(r.ring, f)
	}
	f.weight = w
	f.items = append(f.items, item[T]{v: v, cost: float64(max(k.Cost, 1))})
	r.n++
}

// pop takes the next value by deficit round-robin; the class must not be
// empty.
func (r *rounds[T]) pop() T {
	for misses := 0; ; {
		f := r.ring[r.cur]
		if !f.credited {
			f.deficit += r.quantum * f.weight
			f.credited = true
		}
		if head := f.items[0]; head.cost <= f.deficit {
			f.deficit -= head.cost
			f.items[0] = item[T]{}
			f.items = f.items[1:]
			r.n--
			if len(f.items) == 0 {
				r.leave(r.cur)
			}
			return head.v
		}
		f.credited = false
		r.cur = (r.cur + 1) % len(r.ring)
		if misses++; misses == len(r.ring) {
			// A whole round served nobody (costs far above the quantum):
			// credit the rounds it would take at once.
			r.skipRounds()
			misses = 0
		}
	}
}

// skipRounds credits every flow the whole rounds after this one that pass
// before some flow's head fits: the same order as visiting them one by
// one, without the loop.
func (r *rounds[T]) skipRounds() {
	k := math.Inf(1)
	for _, f := range r.ring {
		need := (f.items[0].cost - f.deficit) / (r.quantum * f.weight)
		k = min(k, math.Ceil(need)-1)
	}
	if k < 1 {
		return
	}
	for _, f := range r.ring {
		f.deficit += k * r.quantum * f.weight
	}
}

// leave takes the flow at ring index i out of the ring; cur then names the
// flow after it.
func (r *rounds[T]) leave(i int) {
	f := r.ring[i]
	delete(r.flows, f.tenant)
	r.ring = append(r.ring[:i], r.ring[i+1:]...)
	if r.cur > i {
		r.cur--
	}
	if r.cur >= len(r.ring) {
		r.cur = 0
	}
}

// remove takes the values drop reports true for out of every flow.
func (r *rounds[T]) remove(drop func(T) bool) []T {
	var out []T
	for i := 0; i < len(r.ring); {
		f := r.ring[i]
		kept := f.items[:0]
		for _, it := range f.items {
			if drop(it.v) {
				out = append(out, it.v)
			} else {
				kept = append(kept, it)
			}
		}
		clear(f.items[len(kept):])
		f.items = kept
		if len(kept) == 0 {
			r.leave(i)
			continue
		}
		i++
	}
	r.n -= len(out)
	return out
}
