package router

import (
	"fmt"

	"kvwin/engine"
)

// Filters: which backends a turn may go to at all.
//
// Every turn passes the fleet through named filters before anything is
// scored: healthy, serves the model, fits the prompt. A backend a filter
// drops is never tried, so it never counts as a failure. The tenant pin
// (tenancy.go) is not a filter: it drops no backend, it chooses the slot
// of the backend being tried (place, attempt.go).

// filter keeps the members a turn may go to.
type filter func(m *member) bool

// healthy keeps the members available to a turn (backendState.Available:
// the last health check or turn passed).
func healthy(m *member) bool { return m.state.Available() }

// failsFast keeps the members that are not down for a timeout
// (backendState.FailsFast): down for a reason that fails fast (refused,
// 5xx), or not down at all; a member still joining (no health check
// passed yet) is not one of them.
func failsFast(m *member) bool { return m.state.FailsFast() }

// servesModel keeps the members serving model; a member that names no
// model, or a turn that names none, matches any.
func servesModel(model string) filter {
	return func(m *member) bool {
		mm := m.backend.Info().Model
		return model == "" || mm == "" || model == mm
	}
}

// fitsPrompt keeps the members whose slots hold a prompt of length tokens
// (or that do not say how much theirs hold).
func fitsPrompt(length int) filter {
	return func(m *member) bool {
		c := m.backend.Info().ContextSlot
		return c == 0 || length < c
	}
}

// keep is the members that pass every filter, in order.
func keep(members []*member, filters ...filter) []*member {
	var out []*member
next:
	for _, m := range members {
		for _, f := range filters {
			if !f(m) {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// live is the members a turn for model may be tried on: the healthy ones
// serving it. With none healthy, before answering 503, the ones down for
// a reason that fails fast, not those that timed out: a node that came
// back between two health checks (a restart) serves at once instead of
// after the next check.
func (r *Router) live(model string) ([]*member, error) {
	live := keep(r.fleet(), healthy, servesModel(model))
	if len(live) == 0 {
		live = keep(r.fleet(), failsFast, servesModel(model))
	}
	if len(live) == 0 {
		return nil, fmt.Errorf("%w: no healthy backend serves model %q (%d configured)", engine.ErrUnavailable, model, len(r.fleet()))
	}
	return live, nil
}

// fitting is the members of live whose slots hold a prompt of length
// tokens: one whose slots are smaller cannot serve it, whatever the
// gateway was told, and is skipped, not tried and failed. With none, the
// prompt is too long for the fleet.
func fitting(live []*member, length int) ([]*member, error) {
	fits := keep(live, fitsPrompt(length))
	if len(fits) == 0 {
		largest := 0
		for _, m := range live {
			largest = max(largest, m.backend.Info().ContextSlot)
		}
		return nil, &engine.ContextLengthError{PromptTokens: length, Limit: largest}
	}
	return fits, nil
}
