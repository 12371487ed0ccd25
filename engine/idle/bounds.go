package idle

import (
	"fmt"
	"time"
)

// Bounds points at the four time bounds a remote backend's Config sets
// (engine/llamaserver, engine/ollama), so that both adapters check and
// default them alike: a metadata call's, each silence after the first
// token (the Watchdog's idle timeout), opening a connection, and the wait
// for the first token (the Watchdog's first).
type Bounds struct {
	Call, Idle, Connect, FirstToken *time.Duration
}

// Check returns an error, after the adapter's name, naming the first
// bound, in the order of the fields, that is negative.
func (b Bounds) Check(adapter string) error {
	for _, f := range []struct {
		name string
		v    *time.Duration
	}{{"timeout", b.Call}, {"idle timeout", b.Idle}, {"connect timeout", b.Connect}, {"first-token timeout", b.FirstToken}} {
		if *f.v < 0 {
			return fmt.Errorf("%s: %s %v is negative", adapter, f.name, *f.v)
		}
	}
	return nil
}

// Default gives each bound left zero its default, given in the order of
// the fields.
func (b Bounds) Default(call, idle, connect, firstToken time.Duration) {
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{b.Call, call}, {b.Idle, idle}, {b.Connect, connect}, {b.FirstToken, firstToken}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
}
