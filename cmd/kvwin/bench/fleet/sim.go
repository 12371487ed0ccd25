package fleet

import (
	"container/heap"
	"context"
	"log/slog"
	"strconv"
	"time"

	"kvwin/cmd/kvwin/bench/fleet/peers"
	"kvwin/engine"
	"kvwin/internal/ident"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
)

// The simulation.
//
// Time is simulated: an event queue ordered by time, and the router's
// clock (router.Config.Now) reads it; nothing sleeps. The router is
// kvwin's own, configured as `kvwin serve` configures a gateway without
// keys (its scorer, registry, tenancy and health checks; one tenant), over
// simulated nodes (node.go) it drives as remote backends: engine.Backends
// whose Generate parks its caller until the simulation reaches the first
// token, then the end.
//
// One thread of control at a time: the event loop runs an event; an event
// that starts a turn runs the router's Generate on a goroutine of its own
// and waits until that goroutine parks inside a node (or returns); an
// event that reaches a turn's first token or end resumes the turn's
// goroutine and waits again until it parks or returns. So the router runs
// exactly as in serve, on its own goroutines, but never concurrently with
// the simulation or another turn, and a run is reproducible (but for the
// random policy, whose order is the router's own).

// Config is one simulated fleet.
type Config struct {
	Nodes, Slots int
	Context      int    // KV tokens per slot
	Kind         string // KindLlamaServer or KindKvwin
	// CacheRAM is a llama-server's host-memory prompt cache in bytes
	// (--cache-ram; promptcache.go); 0 none, as the llama-server.
	CacheRAM int64
	Policy   string
	Model    NodeModel
	// Tiers is each kvwin node's snapshot store (tiers.go); zero: none,
	// as before issue 48.
	Tiers Tiers
	// Names, if set, names the nodes, and ModelName the model they serve
	// (a replay gives the real fleet's, which the router's keys and
	// rendezvous ties hash); default node000… and "sim".
	Names     []string
	ModelName string
}

// turnRecord is one turn as the simulation saw it.
type turnRecord struct {
	conv             *conversation
	ci, index        int
	id               string
	returned         bool // the router's Generate returned
	slot, pin        int
	answer           []int
	arrived, started time.Duration // at the router; on a slot
	prefillAt, first time.Duration // prefill began; first token
	end              time.Duration
	cached, computed int
	// restored is the tokens of the snapshot the turn's node restored
	// (0: none), restoredFrom its tier.
	restored     int
	restoredFrom kvcache.Medium
	// held is, for a returning turn, where its conversation's KV was on
	// the node of its previous turn when it arrived (excess.go).
	held                 string
	err                  error
	backend              string
	generated, promptLen int
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	now     time.Duration
	base    time.Time
	queue   events
	seq     uint64
	yield   chan struct{} // a turn's goroutine parked or returned
	pending map[string]*turnRecord
	router  *router.Router
	nodes   []*node
	byName  map[string]*node
	last    map[int]*node // each conversation's node of its last turn
	turns   []*turnRecord
	active  int // conversations begun and not ended
	// activeArea integrates active over time, for the mean.
	activeArea float64
	lastAt     time.Duration
	// onEnd, if set, is told of each turn's end instead of the
	// conversation going on after its think time (a replay drives it).
	onEnd func(*turnRecord)
}

// after schedules fn at d from now.
func (s *sim) after(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.queue, event{at: s.now + d, seq: s.seq, fn: fn})
}

// park is called on a turn's goroutine: control goes back to the event
// loop until resume(wake).
func (s *sim) park(wake chan struct{}) {
	s.yield <- struct{}{}
	<-wake
}

// resume is called by the event loop: the parked goroutine runs until it
// parks again or returns.
func (s *sim) resume(wake chan struct{}) {
	wake <- struct{}{}
	<-s.yield
}

func (s *sim) clock() time.Time { return s.base.Add(s.now) }

// outcome is one run: every turn, and the mean number of conversations in
// progress.
type outcome struct {
	turns      []*turnRecord
	meanActive float64
}

// run simulates convs on the fleet of cfg.
func run(ctx context.Context, cfg Config, convs []*conversation) (outcome, error) {
	s, err := newSim(cfg)
	if err != nil {
		return outcome{}, err
	}
	defer s.router.Close()
	for ci, c := range convs {
		s.at(c.start, func() { s.begin(ctx, ci, c) })
	}
	return s.loop(), nil
}

// newSim builds the fleet of cfg and its router.
func newSim(cfg Config) (*sim, error) {
	s := &sim{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), yield: make(chan struct{}), pending: map[string]*turnRecord{},
		byName: map[string]*node{}, last: map[int]*node{}}
	backends := make([]engine.Backend, cfg.Nodes)
	for i := range backends {
		n := newNode(s, i, cfg)
		s.nodes = append(s.nodes, n)
		s.byName[n.info.Name] = n
		backends[i] = n
		if n.journal != nil {
			backends[i] = journaled{n} // the router follows its journal (follow.go)
		}
	}
	// A peer's policy is its scorer (peers.New; nil for kvwin's own).
	r, err := router.New(router.Config{Policy: cfg.Policy, Scorer: peers.New(cfg.Policy), SoleTenant: web.DefaultTenant, Now: s.clock},
		backends, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	s.router = r
	s.flush() // every follower has subscribed
	return s, nil
}

// flush waits until the router has applied every journal event the nodes
// published (follow.go).
func (s *sim) flush() {
	for _, n := range s.nodes {
		if n.journal != nil && n.pending() {
			n.flush()
		}
	}
}

// loop runs the events until none is left.
func (s *sim) loop() outcome {
	for s.queue.Len() > 0 {
		ev := heap.Pop(&s.queue).(event)
		s.activeArea += float64(s.active) * (ev.at - s.lastAt).Seconds()
		s.now, s.lastAt = ev.at, ev.at
		ev.fn()
		s.flush()
	}
	out := outcome{turns: s.turns}
	if s.now > 0 {
		out.meanActive = s.activeArea / s.now.Seconds()
	}
	return out
}

// at schedules fn at the absolute simulated time t.
func (s *sim) at(t time.Duration, fn func()) { s.after(max(t-s.now, 0), fn) }

// begin starts conversation c (index ci) with its first turn.
func (s *sim) begin(ctx context.Context, ci int, c *conversation) {
	s.active++
	s.turn(ctx, ci, c, 0)
}

// turn sends turn t of conversation c through the router. A turn the
// router fails returns at once; one it places parks in a node, whose
// finish ends it (ended).
func (s *sim) turn(ctx context.Context, ci int, c *conversation, t int) {
	rec := &turnRecord{conv: c, ci: ci, index: t, answer: c.answer(t), arrived: s.now, promptLen: c.promptEnd[t],
		id: strconv.Itoa(ci) + "." + strconv.Itoa(t)}
	if t > 0 {
		rec.held = s.last[ci].holds(ci, c.stream[:c.answerEnd[t-1]-1])
	}
	s.pending[rec.id] = rec
	s.turns = append(s.turns, rec)
	req := engine.Request{Model: s.nodes[0].info.Model, Tokens: c.prompt(t), MaxTokens: len(rec.answer) + 1, Slot: -1,
		Owner: ident.Owner{Tenant: web.DefaultTenant, Conversation: rec.id}, Sampling: engine.DefaultSampling()}
	go func() {
		res, err := s.router.Generate(ctx, req, nil)
		rec.err, rec.backend, rec.generated = err, res.Backend, len(res.Tokens)
		rec.returned = true
		s.yield <- struct{}{}
	}()
	<-s.yield
	if rec.returned {
		rec.end = s.now
		s.ended(rec)
	}
}

// ended schedules the conversation's next turn after its think time (a
// trace's at its own time), or ends the conversation.
func (s *sim) ended(rec *turnRecord) {
	delete(s.pending, rec.id)
	s.last[rec.ci] = s.byName[rec.backend]
	if s.onEnd != nil {
		s.onEnd(rec)
		return
	}
	c, t := rec.conv, rec.index
	if t+1 >= c.turns() {
		s.active--
		return
	}
	next := s.now + c.think[t]
	if c.at != nil {
		next = c.at[t+1]
	}
	s.at(next, func() { s.turn(context.Background(), rec.ci, c, t+1) })
}
