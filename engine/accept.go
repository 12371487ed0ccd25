package engine

import "context"

// Acceptance. A streamed answer's first bytes should leave as soon as the
// request can no longer be refused with a status, not with its first token:
// a long queue or prefill otherwise holds a client with no byte at all, and
// clients with a stream watchdog (Claude Code drops a stream silent for
// 300 s) give up. Only the backend knows when that is: the embedded engine
// once the request is tokenized, checked and in its queue; a remote adapter
// once the server answered 200 and started its stream. So the caller puts
// a hook in the context (as net/http/httptrace does for a client's
// connection events) and the backend calls Accepted there.
//
// Acceptance says nothing of what follows: the backend may still fail
// before its first token (a router then tries another backend, which may
// accept again), and only the first event means something was generated.
// A backend that never calls Accepted leaves the caller to open its answer
// with the first event.

type acceptKey struct{}

// WithAccepted returns a copy of ctx carrying fn, which the backend serving
// a request made with it calls when it has accepted the request (see
// above). fn may be called more than once (a router's later attempts) and
// from any goroutine; it must return at once.
func WithAccepted(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, acceptKey{}, fn)
}

// Accepted tells the caller that the request of ctx is accepted: every
// check that would refuse it has passed, and it waits only for a slot, its
// prefill and its first token. It does nothing when the caller put no hook
// in ctx. It does not block.
func Accepted(ctx context.Context) {
	if fn, ok := ctx.Value(acceptKey{}).(func()); ok && fn != nil {
		fn()
	}
}
