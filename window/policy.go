package window

import (
	"fmt"
	"sync"

	"kvwin/engine"
)

// Policy names, as --window and X-Kvwin-Window-Policy spell them.
const (
	PolicyFull    = "full"
	PolicySliding = "sliding"
	PolicySink    = "sink"
	PolicyMemory  = "memory"
)

// Policies returns the policy names in a stable order.
func Policies() []string {
	return []string{PolicyFull, PolicySliding, PolicySink, PolicyMemory}
}

// Policy cuts a conversation to its window. Cut is a pure function of its
// arguments and the policy's settings, safe for concurrent use.
type Policy interface {
	// Name returns the policy's name.
	Name() string
	// Cut validates msgs and returns where the window cuts them.
	Cut(msgs []engine.Message, count Counter) (Cut, error)
}

// NewPolicy returns the named policy with settings s (defaults filled).
// An unknown name is ErrUnknownPolicy; bad settings are ErrSettings.
func NewPolicy(name string, s Settings) (Policy, error) {
	p, err := newCutter(name, s)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newCutter is NewPolicy as the concrete cutter, which Window keeps so it
// can cut within a request's limit.
func newCutter(name string, s Settings) (cutter, error) {
	s = s.Defaults()
	if err := s.Validate(); err != nil {
		return cutter{}, err
	}
	switch name {
	case PolicyFull, PolicySliding, PolicySink, PolicyMemory:
		return cutter{name: name, s: s}, nil
	}
	return cutter{}, fmt.Errorf("%q (want one of %v): %w", name, Policies(), ErrUnknownPolicy)
}

// cutter implements every policy: they share validation and differ only in
// the replay they run.
type cutter struct {
	name string
	s    Settings
}

var _ Policy = cutter{}

func (p cutter) Name() string { return p.name }

func (p cutter) Cut(msgs []engine.Message, count Counter) (Cut, error) {
	return p.cutWithin(msgs, count, 0, 0, nil)
}

// cutWithin is Cut for a request that may take up to limit tokens when its
// newest unit alone passes the budget (0: the budget; see fit), whose first
// checked messages are known to be valid (their content is not checked
// again: see Window.Build); r, if set, carries the replay's states in and
// out (see resume; only sink and memory replay).
func (p cutter) cutWithin(msgs []engine.Message, count Counter, limit, checked int, r *resume) (Cut, error) {
	if count == nil {
		count = ApproxCount
	}
	// A long history is cut every turn: its shape's arrays are reused.
	room := shapes.Get().(*conversation)
	defer func() {
		room.msgs = nil
		shapes.Put(room)
	}()
	tokens, err := validate(room.count, p.name, msgs, count, p.s.Budget, checked)
	if err != nil {
		return Cut{}, err
	}
	long := 0
	if p.name == PolicySink || p.name == PolicyMemory {
		long = p.s.longMessage()
	}
	*room = newConversation(*room, msgs, tokens, long, minExcerpt)
	return plan(p.name, *room, p.s, limit, r)
}

// plan dispatches to the replay of the policy (see docs/window.md).
func plan(policy string, c conversation, s Settings, limit int, r *resume) (Cut, error) {
	switch policy {
	case PolicyFull:
		return full(c, s)
	case PolicySliding:
		return sliding(c, s)
	case PolicySink:
		return stepped(PolicySink, c, s, 0, -1, limit, r)
	case PolicyMemory:
		return stepped(PolicyMemory, c, s, s.packetTokens(), s.Switch, limit, r)
	}
	return Cut{}, fmt.Errorf("%q: %w", policy, ErrUnknownPolicy)
}

var shapes = sync.Pool{New: func() any { return new(conversation) }}
