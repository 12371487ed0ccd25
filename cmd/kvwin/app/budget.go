package app

import (
	"context"
	"sync"

	"kvwin/engine"
	"kvwin/web"
	"kvwin/window"
)

// unknownContext is the per-slot context a window assumes while no backend
// has said its own (a gateway whose backends were all unreachable at
// start); the window is rebuilt for the real one when a backend joins.
const unknownContext = 4096

// fleetContext is the smallest per-slot context the backends have
// reported; 0 while none has (unreachable ones report 0 and are skipped:
// they would otherwise hide the others).
func fleetContext(backends []engine.Backend) int {
	c := 0
	for _, b := range backends {
		if n := b.Info().ContextSlot; n > 0 && (c == 0 || n < c) {
			c = n
		}
	}
	return c
}

// defaultBudget is the window budget of a per-slot context when
// --window-budget is not given.
func defaultBudget(ctx int) int { return ctx - OutputReserve(ctx) }

// followingWindow is the window of a gateway without --window-budget: its
// budget follows the backends' smallest context as they report it, so a
// backend unreachable at start sets the budget when it joins (and a fleet
// whose contexts change moves with them). The cut stays a pure function
// of the messages and the budget: the window keeps no state of its own,
// so replacing it changes nothing but the budget. Safe for concurrent use.
type followingWindow struct {
	context func() int                               // the fleet's context now; 0: unknown
	build   func(budget int) (*window.Window, error) // a window over the shared store
	log     interface{ Info(string, ...any) }

	mu  sync.Mutex
	ctx int // the context cur was built for; 0: unknownContext
	cur *window.Window
}

var _ web.Windower = (*followingWindow)(nil)

// Build builds req's window with the budget of the fleet's context now.
func (f *followingWindow) Build(ctx context.Context, req window.Request) (window.Result, error) {
	return f.current().Build(ctx, req)
}

// current returns the window for the fleet's context, rebuilding it when
// the context changed.
func (f *followingWindow) current() *window.Window {
	c := f.context()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c > 0 && c != f.ctx {
		if w, err := f.build(defaultBudget(c)); err == nil {
			f.log.Info("window budget follows the backends' context", "ctx_per_slot", c, "was", max(f.ctx, unknownContext), "budget", defaultBudget(c))
			f.cur, f.ctx = w, c
		}
	}
	return f.cur
}
