package router

import (
	"context"
	"errors"
	"fmt"
	"kvwin/internal/zero"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"kvwin/attention"
	"kvwin/engine"
	"kvwin/kvcache"
)

// Config configures a Router. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	Name   string // the gateway's own name; default "gateway"
	Policy string // one of Policies(), or Scorer's name; default prefix
	// Scorer, if set, ranks the candidates instead of Policy's scorer
	// (scorer.go): another router's rules, for comparison (kvwin bench
	// fleet). Policy then only names it (Decision.Policy).
	Scorer Scorer `json:"-"`
	// Registry records what each backend holds; nil gives the router its own.
	Registry    *kvcache.Registry
	BlockTokens int // default 16
	// BalanceAbs and BalanceRel are the hot-spot guard's thresholds.
	BalanceAbs int     // default 4 requests
	BalanceRel float64 // default 2×
	// TieTolerance: predictions within this fraction of the best, or within
	// the time of TieTokens tokens, are ties (broken by rendezvous hashing).
	// TieTokens keeps a shared template preamble of a block or two from
	// deciding where unrelated conversations go.
	TieTolerance float64 // default 0.1
	TieTokens    int     // default 64
	// HealthInterval is the period of active health checks of a healthy
	// backend; a failing one is retried with exponential backoff up to
	// HealthMaxBackoff.
	HealthInterval   time.Duration // default 2s
	HealthMaxBackoff time.Duration // default 30s
	HealthTimeout    time.Duration // default 2s
	// SlotsInterval is the longest the router goes without reading what
	// the slots of a backend that can say hold (llama-server's /slots);
	// it also reads them when a backend joins and when a turn's reported
	// reuse disagrees with the registry (slots.go). Default 5s.
	SlotsInterval time.Duration
	// SoleTenant is the one tenant of a gateway without keys: a prompt a
	// backend's slot holds that the router did not send there is keyed as
	// this tenant's. Empty (a gateway with keys): such a slot holds
	// nothing as far as the registry is concerned.
	SoleTenant string
	// PrefillTokensPerSecond seeds each backend's cost model until it has
	// measured its own; default 2000.
	PrefillTokensPerSecond float64
	// IsolateTenants: the gateway serves several tenants (it has API
	// keys), so a turn on a backend that does not keep tenants apart
	// reuses only KV its own tenant computed there (tenancy.go). Off, as
	// with no keys (one tenant), such backends reuse as they choose.
	IsolateTenants bool
	// Observe, if set, is called once per routed turn when it ends, with
	// where it went and why. It runs on the request's goroutine and must
	// not block.
	Observe func(Decision) `json:"-"`
	// Dynamic: backends join and leave while the router runs (Add,
	// Remove: backends found by DNS), so New accepts an empty fleet.
	Dynamic bool
	// Now is the clock the router reads where it scores: the service
	// times that predict a backend's queue wait, and a Decision's time.
	// Default time.Now; a simulated fleet gives its own.
	Now func() time.Time `json:"-"`
}

// Decision is one routed turn: the backend ranked first and its
// prediction, the backends that failed before one answered (failovers),
// and the one that answered.
type Decision struct {
	Time            time.Time     `json:"time"`
	Model           string        `json:"model"`
	Policy          string        `json:"policy"`
	PromptTokens    int           `json:"prompt_tokens"` // in the router's key units
	Candidates      int           `json:"candidates"`
	First           string        `json:"first"`            // ranked first
	PredictedCached int           `json:"predicted_cached"` // tokens the registry says First holds
	Predicted       time.Duration `json:"predicted_ns"`     // First's predicted time to first token
	Failed          []string      `json:"failed,omitempty"` // tried and failed, in order
	Chosen          string        `json:"chosen"`           // answered; "" if none did
	Err             string        `json:"error,omitempty"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Name: "gateway", Policy: PolicyPrefix, BlockTokens: kvcache.DefaultBlockTokens, BalanceAbs: 4, BalanceRel: 2,
		TieTolerance: 0.1, TieTokens: 64, HealthInterval: 2 * time.Second, SlotsInterval: 5 * time.Second, HealthMaxBackoff: 30 * time.Second, HealthTimeout: 2 * time.Second,
		PrefillTokensPerSecond: 2000}
}

func (c Config) withDefaults() (Config, error) {
	zero.Fill(&c, DefaultConfig())
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BalanceAbs < 0 || c.BalanceRel < 1 || c.TieTolerance < 0 || c.PrefillTokensPerSecond < 0 {
		return c, fmt.Errorf("router: thresholds out of range: %+v", c)
	}
	return c, nil
}

// Router is an engine.Backend over a fleet. Safe for concurrent use.
type Router struct {
	cfg    Config
	log    *slog.Logger
	reg    *kvcache.Registry
	exact  *kvcache.Keyer
	approx *kvcache.Keyer
	scorer scorer
	// tracker is Config.Scorer if it follows the turns it ranked; nil
	// otherwise.
	tracker Tracker
	ctx     context.Context // ends at Close: owns every goroutine
	stop    context.CancelFunc
	done    sync.WaitGroup

	// members is the fleet (fleet.go): replaced whole under fleetMu, read
	// through fleet(). draining is the members removed whose turns have
	// not all ended; next numbers the members.
	fleetMu  sync.RWMutex
	members  []*member
	draining []*member
	next     int

	watchMu sync.Mutex
	watch   chan struct{} // closed and replaced at each health change

	planMu   sync.Mutex    // held from a turn's estimate to its slot's claim (generate)
	turns    atomic.Uint64 // turns routed: each turn's prompt.id
	liveness liveness      // how likely each slot's chain is continued (liveness.go)
}

var _ engine.Backend = (*Router)(nil)

// New returns a router over backends, which must all serve the same model,
// and starts its health checks. Close stops them.
func New(cfg Config, backends []engine.Backend, log *slog.Logger) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(backends) == 0 && !cfg.Dynamic {
		return nil, errors.New("router: no backends")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sc, err := newScorer(cfg.Policy, cfg)
	if err != nil {
		return nil, err
	}
	reg := kvcache.OrNew(cfg.Registry, log)
	r := &Router{cfg: cfg, log: log, reg: reg, scorer: sc, watch: make(chan struct{})}
	r.tracker, _ = cfg.Scorer.(Tracker)
	model := ""
	for _, b := range backends {
		if model = b.Info().Model; model != "" {
			break
		}
	}
	ns := kvcache.Namespace{Model: model}
	if r.exact, err = kvcache.NewKeyer(ns, kvcache.KeyerConfig{BlockTokens: cfg.BlockTokens}); err != nil {
		return nil, err
	}
	// Approximate keys are the scheme the Ollama adapter's own estimate
	// uses (kvcache.NewTextKeyer over its PromptText), so both agree.
	if r.approx, err = kvcache.NewTextKeyer(model); err != nil {
		return nil, err
	}
	r.ctx, r.stop = context.WithCancel(context.Background())
	seen := map[string]bool{}
	for i, b := range backends {
		info := b.Info()
		if seen[info.Name] {
			r.stop()
			r.done.Wait()
			return nil, fmt.Errorf("router: two backends named %q", info.Name)
		}
		seen[info.Name] = true
		m, err := r.join(i, b, true)
		if err != nil {
			r.stop()
			r.done.Wait()
			return nil, err
		}
		r.members = append(r.members, m)
	}
	r.next = len(backends)
	r.done.Add(1)
	go r.checkHealth(r.ctx)
	return r, nil
}

// Close stops the health checks. It does not close the backends.
func (r *Router) Close() error {
	r.stop()
	r.done.Wait()
	return nil
}

// CountMessage counts m's tokens with the first healthy backend that can,
// so the gateway's window plans in the fleet's own tokens; it estimates from
// the bytes when none can.
func (r *Router) CountMessage(m engine.Message) int {
	if b := r.counter(); b != nil {
		mc, _ := engine.As[engine.MessageCounter](b)
		return mc.CountMessage(m)
	}
	return engine.EstimateTokens(len(m.Role)+len(m.Content)) + engine.MessageOverhead
}

var _ engine.ConversationCounter = (*Router)(nil)

// CountMessages counts msgs for tenant with the backend CountMessage
// counts with: as a conversation (from its cache of tenant's messages)
// if it counts them so, else message by message.
func (r *Router) CountMessages(tenant string, msgs []engine.Message) []int {
	if cc, ok := engine.As[engine.ConversationCounter](r.counter()); ok {
		return cc.CountMessages(tenant, msgs)
	}
	out := make([]int, len(msgs))
	for i, m := range msgs {
		out[i] = r.CountMessage(m)
	}
	return out
}

// counter is the first healthy backend that counts messages, nil if none.
func (r *Router) counter() engine.Backend {
	for _, mem := range r.fleet() {
		if _, ok := engine.As[engine.MessageCounter](mem.backend); ok && mem.state.Available() {
			return mem.backend
		}
	}
	return nil
}

// Backends returns the backends the router fronts.
func (r *Router) Backends() []engine.Backend {
	out := make([]engine.Backend, len(r.fleet()))
	for i, m := range r.fleet() {
		out[i] = m.backend
	}
	return out
}

// Registry returns the registry the router records into.
func (r *Router) Registry() *kvcache.Registry { return r.reg }

// Info describes the fleet: the model, the smallest slot context and the
// total slots of the healthy backends.
func (r *Router) Info() engine.Info {
	info := engine.Info{Name: r.cfg.Name}
	for _, m := range r.fleet() {
		mi := m.backend.Info()
		if info.Model == "" {
			info.Model = mi.Model
		}
		if info.ContextSlot == 0 || mi.ContextSlot < info.ContextSlot {
			info.ContextSlot = mi.ContextSlot
		}
		info.Slots += mi.Slots
	}
	return info
}

// Generate routes req; see docs/routing.md. It blocks like the backend it
// chose. Its errors tell a client only what kind of failure it was
// (public.go); their text has the details.
func (r *Router) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	res, err := r.generate(ctx, req, stream)
	return res, public(err)
}

// generate is Generate with the backends' errors as they are: the fleet
// filtered (filter.go), the candidates estimated (estimate.go) and ranked
// by the policy's scorer (policy.go), and the turn attempted on them in
// order (attempt.go).
func (r *Router) generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	live, err := r.live(req.Model)
	if err != nil {
		return engine.Result{}, err
	}
	k, err := r.key(ctx, req, live)
	if err != nil {
		return engine.Result{}, err
	}
	fits, err := fitting(live, k.length)
	if err != nil {
		return engine.Result{}, err
	}
	// A turn's plan and the slot it claims (run's startRun) are one step:
	// two turns estimated at once would both see a slot free and plan it,
	// and the second would overwrite the first's KV. The lock is released
	// before the turn is sent (attempt), and before a tenant pin may block.
	r.planMu.Lock()
	releasePlan := sync.OnceFunc(r.planMu.Unlock)
	defer releasePlan()
	cands := r.estimate(k, fits)
	p := k.prompt(r.turns.Add(1))
	ranked := r.scorer.rank(cands, p)
	at := r.cfg.Now()
	var t tally
	if r.tracker != nil {
		stream = r.tracker.Watch(p.public(), stream)
	}
	chosen, res, err := r.attempt(ctx, req, k, stream, ranked, &t, releasePlan)
	if r.tracker != nil {
		r.tracker.Ended(p.public())
	}
	if r.cfg.Observe != nil && len(ranked) > 0 {
		dec := Decision{Time: at, Model: req.Model, Policy: r.cfg.Policy, PromptTokens: k.length, Candidates: len(cands),
			First: ranked[0].name, PredictedCached: ranked[0].cached, Predicted: ranked[0].predicted, Failed: t.failed, Chosen: chosen}
		if err != nil {
			dec.Err = err.Error()
		}
		r.cfg.Observe(dec)
	}
	return res, err
}

// ForgetConversation deletes what the backends saved for a tenant's
// conversation (a kvwin node's KV snapshots) and returns how many held
// some. It asks every backend that can, healthy or not, and blocks on them.
func (r *Router) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	n := 0
	var errs []error
	for _, m := range r.fleet() {
		if f, ok := engine.As[engine.ConversationForgetter](m.backend); ok {
			k, err := f.ForgetConversation(ctx, tenant, conversation)
			n += k
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			}
		}
	}
	return n, errors.Join(errs...)
}

// learn records what the backend now holds and what the turn cost.
func (r *Router) learn(m *member, k key, res engine.Result) {
	chain := k.exact
	if !m.exact {
		chain = k.approx
	}
	slot := max(res.Slot, 0)
	loc := kvcache.Location{Backend: m.name, Slot: slot}
	if len(chain.Keys) > 0 || chain.Length > 0 {
		// What the slot held before this turn, read before Correct rewrites
		// it: if this turn displaced another conversation from the slot, a
		// backend with snapshots still has it on disk.
		prev := r.reg.Held(loc)
		cached := res.Timings.CachedTokens
		if !m.exact && k.length > 0 {
			cached = cached * chain.Length / k.length // tokens → bytes of text
		}
		if r.plansSlots(m) && !m.backend.Info().SharesPrefixes && !m.restores.Load() && cached >= chain.Units(kvcache.SharedPrefix(prev, chain.Keys)+2) {
			// More than the slot held: the backend restored it from
			// elsewhere (placement.go).
			m.restores.Store(true)
			r.log.Info("backend restores prompts its slots gave up (a prompt cache); counting them as held there",
				"backend", m.name, "slot", slot, "reused", cached)
		}
		if m.restores.Load() && 2*kvcache.SharedPrefix(prev, chain.Keys) < len(prev) {
			// The server swapped the slot with its prompt cache
			// (placement.go): what it loaded, or no longer has, the
			// router forgets.
			m.swapped(r.reg, chain, cached)
		}
		r.reg.Correct(loc, chain, cached)
		after := chain // what the slot holds after the turn
		if !m.exact && res.Text != "" && k.text != "" {
			// The canonical rendering puts the answer where the next
			// turn's prompt continues, as the backend's KV holds it.
			after = k.approxKeyer.Text(k.text + res.Text)
		}
		if m.exact && len(res.Tokens) > 1 {
			// The last generated token was sampled, not computed into KV.
			// Only the blocks the answer completes are hashed: the
			// prompt's are k.exact.
			after = k.keyer.TokensAfter(k.exact.Keys, append(append([]int(nil), k.tokens...), res.Tokens[:len(res.Tokens)-1]...))
		}
		if disagrees(prev, chain, cached) {
			m.wantRead.Store(true) // the slot lost what the registry believed: read the others too
		}
		if (m.snapshots && !m.saved.publishes() || m.restores.Load()) && len(prev) > 0 && !slices.Equal(prev, after.Keys[:min(len(prev), len(after.Keys))]) {
			m.remember(r.reg, kvcache.Chain{Keys: prev, Length: len(prev) * after.BlockSize, BlockSize: after.BlockSize, Approximate: after.Approximate})
		}
		r.reg.Record(loc, after)
		r.liveness.observe(loc, chain.Keys, after.Keys, chain.Length, kvcache.SharedPrefix(prev, chain.Keys), k.owner, r.cfg.Now())
		count := -1 // what the slot's KV holds now, if the answer's tokens say
		if m.exact && len(res.Tokens) > 1 {
			count = after.Length
		}
		m.noteTurn(slot, k.tenant, count)
	}
	t := res.Timings
	if t.PromptEval > 0 {
		m.cal.Observe(attention.Observation{New: max(t.PromptTokens-t.CachedTokens, 1), Context: t.CachedTokens, Elapsed: t.PromptEval})
	}
}
