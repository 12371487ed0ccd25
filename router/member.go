package router

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"kvwin/attention"
	"kvwin/engine"
	"kvwin/kvcache"
)

// member is one backend of the fleet with what the router learns about it.
type member struct {
	index   int
	name    string
	backend engine.Backend
	exact   bool // renders exact prompt tokens (keys by tokens, not text)
	// slots and ctx are the backend's slots and context per slot as last
	// read (at start, on rejoin, when a pin was refused); 0 unknown.
	slots atomic.Int64
	ctx   atomic.Int64
	// snapshots: the backend keeps displaced slots on disk (a kvwin node);
	// the router counts them as its second tier, newest maxSnapshots.
	snapshots bool
	snapMu    sync.Mutex
	snapIDs   []string
	// saved: the snapshots the node publishes, and in which tier (saved.go).
	saved savedTiers
	cal   *attention.Calibration

	// reader reads what the backend's slots hold (slots.go), nil if it
	// cannot; resMode says whether it does (residency*); wantRead asks
	// the next check to read them (a turn disagreed with the registry).
	reader   engine.SlotReader
	resMode  atomic.Int32
	wantRead atomic.Bool
	// follower follows the backend's journal of its slots (follow.go), nil
	// if it has none; following: the journal is followed now (a snapshot
	// was applied and the stream is up); resMu orders the follower's
	// writes to the registry against refresh's release at a rejoin.
	// remoteLoad is the backend's requests running and waiting as its
	// journal last said, less this router's own turns that ended since
	// (remoteReported, ownTurnEnded); remoteReports counts the reports.
	follower      engine.ResidencyFollower
	unfollow      context.CancelFunc // ends the follower (nil: none)
	following     atomic.Bool
	resMu         sync.Mutex
	remoteLoad    atomic.Int64
	remoteReports atomic.Uint64
	// reportMu orders the journal's load reports against the end of the
	// router's own turns (loadReported, turnEnded); answered is where the
	// backend's journal stood at the end of the newest answer that said
	// (engine.Result.Journal): a report from before it is older than
	// that turn's end.
	reportMu sync.Mutex
	answered kvcache.Cursor
	// learned is what the router's own turns left in each slot.
	slotMu  sync.Mutex
	learned map[int]slotLearned
	// lastRead is when the slots were last read; owned by the running
	// check (see checking).
	lastRead time.Time

	// state is its health as the router believes it (state.go).
	state backendState
	// turns counts the turns on it; drained, once it was removed, is
	// closed when turns reaches 0 (fleet.go).
	turnMu  sync.Mutex
	turns   int
	drained chan struct{}
	// checking: a health check or probe of it is running.
	checking atomic.Bool
	load     atomic.Int64  // requests in flight
	service  atomic.Uint64 // mean service time (EWMA), float64 seconds bits
	prefills prefillQueue  // prompt work sent and not at its first token

	// owners is what the router knows of whose KV each slot holds, kept
	// for backends it isolates tenants on (tenancy.go); seq orders claims.
	ownMu  sync.Mutex
	owners []slotOwner
	seq    uint64
	freed  chan struct{} // closed and replaced at each settled claim

	// runs counts the router's turns pinned to each slot of a backend it
	// plans slots for (placement.go).
	runs slotRuns
	// restores: a backend whose slots reuse only their own KV reported
	// reusing more of a prompt than the slot held (llama-server's
	// host-memory prompt cache, --cache-ram); what its slots give up is
	// then counted as held there, as a kvwin node's snapshots are.
	restores atomic.Bool

	// now is the router's clock (Config.Now): service times are read on it.
	now func() time.Time

	// Owned by the running check (see checking).
	backoff time.Duration
	next    time.Time
}

func newMember(i int, b engine.Backend, cfg Config) (*member, error) {
	info := b.Info()
	cal, err := attention.NewCalibration(attention.CalibrationConfig{
		Prior: attention.Coefficients{A: 1 / cfg.PrefillTokensPerSecond},
	})
	if err != nil {
		return nil, err
	}
	_, exact := engine.As[engine.Prompter](b)
	m := &member{index: i, name: info.Name, backend: b, exact: exact, cal: cal, snapshots: info.Snapshots, now: cfg.Now}
	m.reader, _ = engine.As[engine.SlotReader](b)
	m.follower, _ = engine.As[engine.ResidencyFollower](b)
	m.slots.Store(int64(info.Slots))
	m.ctx.Store(int64(info.ContextSlot))
	m.state.start(true)
	return m, nil
}

// wait predicts the queueing delay: for each request beyond the slots
// (this turn included), the wait for one of the slots to finish, at its
// 90th percentile (slotWaitQuantile); or, if longer, the prompt work the
// router sent ahead of this turn that has not reached its first token yet
// (prefillQueue): a backend's prefills share its compute, whatever slots
// are idle.
func (m *member) wait() time.Duration {
	ahead := m.prefills.wait(m.now())
	slots := m.slotCount()
	over := m.inflight() - slots + 1
	if over <= 0 {
		return ahead
	}
	s := math.Float64frombits(m.service.Load())
	return max(ahead, time.Duration(slotWaitQuantile*float64(over)*s*float64(time.Second)/float64(slots)))
}

// slotWaitQuantile turns the mean wait for a slot into its 90th
// percentile. A turn that finds every slot busy waits for the first of
// them to finish, and all the router knows of when that is is the
// backend's mean service time s: taken as memoryless (the exponential law,
// the one a mean alone fixes), the first of k busy slots frees after s/k
// on average and after ln 10 · s/k at the 90th percentile. The router is
// held to the tail of the time to first token (TTFT p90), and the wait is
// the one part of a prediction that guesses at other requests (the
// prefill it is weighed against is the backend's calibrated cost), so it
// counts the wait at that percentile. Counted at its mean, a queue behind
// a backend that held the prompt looked shorter than a recompute
// elsewhere more often than it was (docs/routing.md, Scoring).
const slotWaitQuantile = math.Ln10

// prefillQueue is the router's view of the prompt work it has sent a
// backend: the time the backend would be done with every prefill that has
// not reached its first token, done one after another at the predicted
// times. A prefill that ends sooner than predicted moves the rest with it;
// with none left the queue is empty. Safe for concurrent
// use.
type prefillQueue struct {
	mu      sync.Mutex
	free    time.Time // when the queued prefills would all be done
	pending int
}

// enqueue queues a prefill of d at now and returns when it would be done.
func (q *prefillQueue) enqueue(now time.Time, d time.Duration) (due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.free.Before(now) {
		q.free = now
	}
	q.free = q.free.Add(d)
	q.pending++
	return q.free
}

// finish ends, at now, the prefill that was due at due: one early moves
// those queued after it earlier by as much (one late has held them up
// already, as the queue's time passed now).
func (q *prefillQueue) finish(now, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending--; q.pending <= 0 {
		q.pending, q.free = 0, time.Time{}
		return
	}
	if early := due.Sub(now); early > 0 {
		q.free = q.free.Add(-early)
	}
}

// wait is how long from now the queued prefills would take.
func (q *prefillQueue) wait(now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(q.free.Sub(now), 0)
}

// inflight is the backend's requests in flight: the router's own, or what
// the backend's journal says runs and waits there, the more.
func (m *member) inflight() int { return int(max(m.load.Load(), m.remoteLoad.Load())) }

// remoteReported records the backend's load as its journal says it now.
func (m *member) remoteReported(n int) {
	m.remoteLoad.Store(int64(n))
	m.remoteReports.Add(1)
}

// loadReported records n, the backend's load as its journal said it at
// event at, unless an answer of the backend's already ended after that
// event (answered): the event then says the load before that turn's end,
// and the next event, which says it after, is on its way. A report of the
// turn's own running, read after its answer, counted the idle node busy
// and sent the conversation's next turn away from the node holding it.
func (m *member) loadReported(n int, at kvcache.Cursor) {
	m.reportMu.Lock()
	defer m.reportMu.Unlock()
	if at.Epoch != "" && at.Epoch == m.answered.Epoch && at.After < m.answered.After {
		return
	}
	m.remoteReported(n)
}

// turnEnded records the end of one of the router's own turns on the
// backend: where its answer says the backend's journal stood (at; zero if
// it does not say), and the turn off the remote load (ownTurnEnded).
func (m *member) turnEnded(reports uint64, at kvcache.Cursor) {
	m.reportMu.Lock()
	defer m.reportMu.Unlock()
	if at.Epoch != "" && (at.Epoch != m.answered.Epoch || at.After > m.answered.After) {
		m.answered = at
	}
	m.ownTurnEnded(reports)
}

// ownTurnEnded takes a turn of this router's that just ended off the
// remote load, if a report came while it ran (reports is the count when
// it began) and so may count it: the journal says a request ended only
// after it has, by another connection than the answer's, and a client's
// next request (a retry, an agent's next step, a test's next turn) often
// comes first. Counted busy, the backend holding the conversation lost it
// to an idle one (TestFleetRestoresReturningConversationsFromTheirNodesSnapshots,
// with the node's own report of an idle slot mended: 4 of 30 runs failed
// so, 2 of 40 with this; a report of the turn's that arrives after its
// end is not taken at all: loadReported). A report taken before the turn
// began does not count it and is left as it is; the next report replaces
// either. reportMu is held.
func (m *member) ownTurnEnded(reports uint64) {
	if m.remoteReports.Load() == reports {
		return
	}
	for {
		n := m.remoteLoad.Load()
		if n <= 0 || m.remoteLoad.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// slotCount is the backend's slots as last read, at least 1.
func (m *member) slotCount() int { return max(int(m.slots.Load()), 1) }

// generate runs req on the backend, tagging events with the backend's name;
// started reports whether anything reached the client. prefill is the
// turn's predicted prefill there, queued in m.prefills until its first
// token.
func (m *member) generate(ctx context.Context, req engine.Request, stream engine.StreamFunc, prefill time.Duration) (engine.Result, bool, error) {
	if !m.enter() {
		return engine.Result{}, false, fmt.Errorf("%w: backend %s left the fleet", engine.ErrUnavailable, m.name)
	}
	defer m.leave()
	m.load.Add(1)
	reports := m.remoteReports.Load()
	var journal kvcache.Cursor
	defer func() {
		m.load.Add(-1)
		m.turnEnded(reports, journal)
	}()
	began := m.now()
	started := false
	due := m.prefills.enqueue(began, prefill)
	var once sync.Once
	done := func() { once.Do(func() { m.prefills.finish(m.now(), due) }) }
	defer done()
	res, err := m.backend.Generate(ctx, req, func(ev engine.Event) error {
		if ev.First {
			done()
		}
		started = true
		ev.Backend = m.name
		if stream == nil {
			return nil
		}
		return stream(ev)
	})
	res.Backend = m.name
	// The position is in this backend's journal, which means nothing to
	// whoever is served by the router.
	journal, res.Journal = res.Journal, kvcache.Cursor{}
	if err == nil {
		m.observeService(m.now().Sub(began))
	}
	return res, started, err
}

func (m *member) observeService(d time.Duration) {
	const alpha = 0.2
	for {
		old := m.service.Load()
		prev := math.Float64frombits(old)
		next := d.Seconds()
		if prev > 0 {
			next = alpha*next + (1-alpha)*prev
		}
		if m.service.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// down marks the backend unhealthy until a health check passes. The line
// it logs carries the request id of ctx, the turn that found it down.
func (m *member) down(ctx context.Context, err error, log *slog.Logger) bool {
	if m.state.down() {
		log.WarnContext(ctx, "backend down; routing around it", "backend", m.name, "err", err)
		return true
	}
	return false
}

// distrust marks the backend unhealthy until a probe generation succeeds:
// it took a turn and did not answer in time.
func (m *member) distrust(ctx context.Context, err error, log *slog.Logger) bool {
	if m.state.distrust() {
		log.WarnContext(ctx, "backend timed out; routing around it until a probe generation succeeds", "backend", m.name, "err", err)
		return true
	}
	return false
}

// swapped updates what the router remembers of m's prompt cache after a
// turn of chain, reusing cached units, ran on a slot the server swapped
// with its cache. The saved prompt the router expected it to load (the
// one keeping the largest share of itself, kvcache.Result's Keeps) left
// the cache if the turn reused it; if the turn reused less, the server no
// longer held it, nor, as its cache drops the oldest first, any prompt
// saved before it.
func (m *member) swapped(reg *kvcache.Registry, chain kvcache.Chain, cached int) {
	var best kvcache.Kept
	for _, kp := range reg.Lookup(chain).Keeps {
		if kp.Backend == m.name {
			best = kp
		}
	}
	if best.Snapshot == "" {
		return
	}
	m.snapMu.Lock()
	i := slices.Index(m.snapIDs, best.Snapshot)
	var drop []string
	switch {
	case i < 0:
	case cached >= chain.Units(best.Blocks):
		drop = []string{best.Snapshot}
		m.snapIDs = slices.Delete(m.snapIDs, i, i+1)
	default:
		drop = slices.Clone(m.snapIDs[:i+1])
		m.snapIDs = slices.Delete(m.snapIDs, 0, i+1)
	}
	m.snapMu.Unlock()
	for _, id := range drop {
		_ = reg.RemoveSnapshot(m.name, id)
	}
}

// maxSnapshots bounds the displaced chains the router remembers per
// backend; the backend's own disk budget may keep fewer, and a turn routed
// on a forgotten one costs only the prefill the backend then does.
const maxSnapshots = 1024

// snapshotID names the chain the router remembers a backend holding, by
// its last block; snapshotTip reads the block back.
func snapshotID(tip kvcache.Key) string { return fmt.Sprintf("%016x", uint64(tip)) }

func snapshotTip(id string) (kvcache.Key, bool) {
	v, err := strconv.ParseUint(id, 16, 64)
	return kvcache.Key(v), err == nil && len(id) == 16
}

// remember records a chain displaced from one of the backend's slots as
// held in its snapshot tier.
func (m *member) remember(reg *kvcache.Registry, c kvcache.Chain) {
	id := snapshotID(c.Keys[len(c.Keys)-1])
	if reg.AddSnapshot(m.name, id, c, 0) != nil {
		return
	}
	m.snapMu.Lock()
	if i := slices.Index(m.snapIDs, id); i >= 0 { // saved again: the newest
		m.snapIDs = slices.Delete(m.snapIDs, i, i+1)
	}
	m.snapIDs = append(m.snapIDs, id)
	var drop []string
	if len(m.snapIDs) > maxSnapshots {
		drop = slices.Clone(m.snapIDs[:len(m.snapIDs)-maxSnapshots])
		m.snapIDs = slices.Clone(m.snapIDs[len(m.snapIDs)-maxSnapshots:])
	}
	m.snapMu.Unlock()
	for _, id := range drop {
		reg.RemoveSnapshot(m.name, id)
	}
}
