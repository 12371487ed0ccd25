package router

import "sync/atomic"

// backendState is what the router believes of one backend's health, and
// the one place a turn, a health check or a filter asks it: Available
// (may a turn go there?) and FailsFast (may a turn try it when no backend
// is available?), in the manner of Caddy reverseproxy's
// Upstream.Available. Every transition is a method here; nothing else
// reads or writes the flags. Safe for concurrent use.
//
// Invariants, kept by the transitions:
//   - a backend that timed out (distrust) is available again only once a
//     probe generation succeeds (pass): the health check probes a suspect
//     backend instead of asking its /health;
//   - joined is never unset: once a health check passed (or the backend
//     was configured at start), it stays so.
type backendState struct {
	// healthy: the last health check or turn passed.
	healthy atomic.Bool
	// joined: a health check passed since it joined (or it was configured
	// at start); a backend still joining is not tried (fleet.go).
	joined atomic.Bool
	// suspect: the backend timed out; it is not trusted again until a
	// probe generation succeeds (answering /health is not enough).
	suspect atomic.Bool
}

// start sets the state of a backend entering the fleet: configured at
// start (ready: available at once) or joining (routed to once a health
// check passes).
func (s *backendState) start(ready bool) {
	s.healthy.Store(ready)
	s.joined.Store(ready)
	s.suspect.Store(false)
}

// Available reports whether a turn may go to the backend: its last health
// check or turn passed.
func (s *backendState) Available() bool { return s.healthy.Load() }

// FailsFast reports whether the backend may be tried when none is
// available: it is down for a reason that fails fast (refused, 5xx), or
// not down at all, and has joined; not one that timed out, whose next
// failure would cost the client the whole wait again.
func (s *backendState) FailsFast() bool { return !s.suspect.Load() && s.joined.Load() }

// Suspect reports whether the backend timed out and waits for a probe
// generation to succeed.
func (s *backendState) Suspect() bool { return s.suspect.Load() }

// down marks the backend unavailable until a health check passes; it
// reports whether it was available.
func (s *backendState) down() bool { return s.healthy.Swap(false) }

// distrust marks the backend unavailable until a probe generation
// succeeds: it took a turn and did not answer in time. It reports whether
// it was available.
func (s *backendState) distrust() bool {
	s.suspect.Store(true)
	return s.healthy.Swap(false)
}

// pass records a health check (or probe) that passed; it reports whether
// the backend was unavailable before.
func (s *backendState) pass() bool {
	s.suspect.Store(false)
	s.joined.Store(true)
	return !s.healthy.Swap(true)
}
