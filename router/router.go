package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"kvwin/attention"
	"kvwin/engine"
	"kvwin/kvcache"
)

// Config configures a Router. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	Name   string // the gateway's own name; default "gateway"
	Policy string // one of Policies(); default prefix
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
	d := DefaultConfig()
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.BlockTokens == 0 {
		c.BlockTokens = d.BlockTokens
	}
	if c.BalanceAbs == 0 {
		c.BalanceAbs = d.BalanceAbs
	}
	if c.BalanceRel == 0 {
		c.BalanceRel = d.BalanceRel
	}
	if c.TieTolerance == 0 {
		c.TieTolerance = d.TieTolerance
	}
	if c.TieTokens == 0 {
		c.TieTokens = d.TieTokens
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = d.HealthInterval
	}
	if c.SlotsInterval == 0 {
		c.SlotsInterval = d.SlotsInterval
	}
	if c.HealthMaxBackoff == 0 {
		c.HealthMaxBackoff = d.HealthMaxBackoff
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = d.HealthTimeout
	}
	if c.PrefillTokensPerSecond == 0 {
		c.PrefillTokensPerSecond = d.PrefillTokensPerSecond
	}
	if c.BalanceAbs < 0 || c.BalanceRel < 1 || c.TieTolerance < 0 || c.PrefillTokensPerSecond < 0 {
		return c, fmt.Errorf("router: thresholds out of range: %+v", c)
	}
	return c, nil
}

// Router is an engine.Backend over a fleet. Safe for concurrent use.
type Router struct {
	cfg     Config
	log     *slog.Logger
	reg     *kvcache.Registry
	exact   *kvcache.Keyer
	approx  *kvcache.Keyer
	members []*member
	order   orderer
	stop    context.CancelFunc
	done    sync.WaitGroup

	watchMu sync.Mutex
	watch   chan struct{} // closed and replaced at each health change
}

var _ engine.Backend = (*Router)(nil)

// New returns a router over backends, which must all serve the same model,
// and starts its health checks. Close stops them.
func New(cfg Config, backends []engine.Backend, log *slog.Logger) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(backends) == 0 {
		return nil, errors.New("router: no backends")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	order, err := newOrderer(cfg.Policy, cfg)
	if err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		if reg, err = kvcache.New(kvcache.Config{Logger: log}); err != nil {
			return nil, err
		}
	}
	r := &Router{cfg: cfg, log: log, reg: reg, order: order, watch: make(chan struct{})}
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
	seen := map[string]bool{}
	for i, b := range backends {
		info := b.Info()
		if seen[info.Name] {
			return nil, fmt.Errorf("router: two backends named %q", info.Name)
		}
		seen[info.Name] = true
		capacity, _ := kvcache.Budget{Context: info.ContextSlot, Slots: max(info.Slots, 1)}.CapacityBlocks(cfg.BlockTokens)
		if err := reg.SetBackend(kvcache.BackendConfig{Name: info.Name, CapacityBlocks: capacity}); err != nil {
			return nil, err
		}
		m, err := newMember(i, b, cfg)
		if err != nil {
			return nil, err
		}
		r.members = append(r.members, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	r.done.Add(1)
	go r.checkHealth(ctx)
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
	for _, mem := range r.members {
		if mc, ok := mem.backend.(engine.MessageCounter); ok && mem.healthy.Load() {
			return mc.CountMessage(m)
		}
	}
	return (len(m.Role)+len(m.Content)+3)/4 + 4
}

// Backends returns the backends the router fronts.
func (r *Router) Backends() []engine.Backend {
	out := make([]engine.Backend, len(r.members))
	for i, m := range r.members {
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
	for _, m := range r.members {
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

// Generate routes req; see the package doc. It blocks like the backend it
// chose. Its errors tell a client only what kind of failure it was
// (public.go); their text has the details.
func (r *Router) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	res, err := r.generate(ctx, req, stream)
	return res, public(err)
}

// generate is Generate with the backends' errors as they are.
func (r *Router) generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (_ engine.Result, err error) {
	serves := func(m *member) bool {
		mm := m.backend.Info().Model
		return req.Model == "" || mm == "" || req.Model == mm
	}
	var live []*member
	for _, m := range r.members {
		if m.healthy.Load() && serves(m) {
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		// Nothing healthy: before answering 503, try the backends that are
		// down for a reason that fails fast (refused, 5xx), not those that
		// timed out. A node that came back between two health checks (a
		// restart) serves at once instead of after the next check.
		for _, m := range r.members {
			if !m.suspect.Load() && serves(m) {
				live = append(live, m)
			}
		}
	}
	if len(live) == 0 {
		return engine.Result{}, fmt.Errorf("%w: no healthy backend serves model %q (%d configured)", engine.ErrUnavailable, req.Model, len(r.members))
	}
	k, err := r.key(ctx, req, live)
	if err != nil {
		return engine.Result{}, err
	}
	// A backend whose slots are smaller than the prompt cannot serve it,
	// whatever the gateway was told: it is skipped, not tried and failed.
	fits := live[:0:0]
	largest := 0
	for _, m := range live {
		c := m.backend.Info().ContextSlot
		largest = max(largest, c)
		if c == 0 || k.length < c {
			fits = append(fits, m)
		}
	}
	if len(fits) == 0 {
		return engine.Result{}, &engine.ContextLengthError{PromptTokens: k.length, Limit: largest}
	}
	cands := r.score(k, fits)
	ordered := r.order.order(cands, k.root())
	var failed []string // backends tried that failed, for Observe
	chosen := ""
	if r.cfg.Observe != nil && len(ordered) > 0 {
		dec := Decision{Time: time.Now(), Model: req.Model, Policy: r.cfg.Policy, PromptTokens: k.length, Candidates: len(cands),
			First: ordered[0].name, PredictedCached: ordered[0].cached, Predicted: ordered[0].predicted}
		defer func() {
			dec.Failed, dec.Chosen = failed, chosen
			if err != nil {
				dec.Err = err.Error()
			}
			r.cfg.Observe(dec)
		}()
	}
	var failures []string
	timedOut, full, shrunk, noLogprobs := 0, 0, 0, 0
	var lastTooLong, lastNoLogprobs error
	for _, c := range ordered {
		m := r.members[c.index]
		sub := req
		if k.tokens != nil && m.exact {
			sub.Messages, sub.Prompt, sub.Tokens = nil, "", k.tokens
		}
		// Pin the slot only for a continuation (the slot holds most of the
		// prompt): a prefix shared with other conversations (a system
		// prompt) can be reused from any slot, and pinning every member of
		// a group to the one slot that holds it would queue them behind
		// each other while other slots sit idle. Never a slot the backend
		// no longer has (a node restarted with fewer).
		// A gateway isolating tenants pins every turn on a backend that
		// does not, and lets it reuse only its own tenant's KV
		// (tenancy.go).
		var claimed *pin
		if r.isolates(m) {
			held := c.slot
			if r.cfg.Policy != PolicyPrefix {
				held = -1
			}
			p, err := m.claim(ctx, req.Tenant, req.Slot, held, c.cached, k.length)
			if err != nil {
				return engine.Result{}, err
			}
			claimed = &p
			sub.Slot, sub.NoCache, sub.SlotOnly = p.slot, req.NoCache || !p.reuse, true
		} else if c.planned && c.slot >= 0 && c.slot < m.slotCount() && r.cfg.Policy == PolicyPrefix && req.Slot < 0 {
			// A backend whose slots reuse only their own KV runs the
			// turn on the slot the router planned, whether it continues
			// the slot or starts in a free one (placement.go).
			sub.Slot = c.slot
		} else if !c.planned && c.slot >= 0 && c.slot < m.slotCount() && r.cfg.Policy == PolicyPrefix && req.Slot < 0 && 2*c.cached >= k.length {
			sub.Slot = c.slot
		}
		endRun := func() {}
		if claimed == nil && sub.Slot >= 0 && r.plansSlots(m) {
			endRun = m.startRun(sub.Slot)
		}
		// A backend that does not keep tenants apart (llama-server,
		// Ollama, a node without our admin key) may reuse another tenant's
		// prefix and say so; what the tenant is told is capped at its own
		// registry prefix there (whole blocks). A gateway of one tenant
		// has no other to tell of: it reports the backend's count exactly.
		sstream, capped := stream, !m.backend.Info().Tenants && r.cfg.SoleTenant == ""
		if capped {
			sstream = capStream(stream, c)
		}
		believed := m.backend.Info().ContextSlot
		res, started, err := r.generateOn(ctx, m, k, req, sub, sstream, claimed)
		if claimed != nil {
			m.settle(*claimed, res.Slot, err == nil)
		}
		if err == nil {
			// The registry and the cost model learn what really happened;
			// only the tenant is told less.
			r.learn(m, k, res)
		}
		endRun() // after learn: the slot is planned for again as it now is
		if capped {
			res.Timings.CachedTokens = c.capCached(res.Timings)
		}
		if err == nil {
			chosen = m.name
			return res, nil
		}
		failed = append(failed, m.name)
		var tooLong *engine.ContextLengthError
		if !started && ctx.Err() == nil && errors.As(err, &tooLong) && (believed == 0 || k.length < believed) {
			// The router thought the prompt fits: the backend's context
			// shrank under it (a node restarted with a smaller one). Its
			// mistake, not the client's: re-read the backend and try the
			// next; only when no backend fits is it the client's answer.
			if rerr := r.refresh(ctx, m, false); rerr != nil {
				r.log.WarnContext(ctx, "re-reading the backend's context failed", "backend", m.name, "err", rerr)
			}
			failures = append(failures, fmt.Sprintf("%s: %v", m.name, err))
			shrunk, lastTooLong = shrunk+1, err
			continue
		}
		if !started && ctx.Err() == nil && errors.Is(err, engine.ErrNoLogprobs) {
			// A backend that cannot report log-probabilities (Ollama)
			// refuses before any call: the next that can serves; only
			// when none can is it the client's answer. Not a failure of
			// the backend: it stays in the fleet.
			failures = append(failures, fmt.Sprintf("%s: %v", m.name, err))
			noLogprobs, lastNoLogprobs = noLogprobs+1, err
			continue
		}
		if started || ctx.Err() != nil || !retryable(err) {
			return res, err
		}
		failures = append(failures, fmt.Sprintf("%s: %v", m.name, err))
		if errors.Is(err, engine.ErrTimeout) {
			if m.distrust(ctx, err, r.log) {
				r.changed()
			}
			// A timeout costs the client the whole first-token wait: it is
			// retried once, on the next backend that can take the turn, and
			// a second one ends the walk.
			if timedOut++; timedOut > 1 {
				break
			}
			continue
		}
		if errors.Is(err, engine.ErrQueueFull) {
			full++ // busy, not broken: it stays in the fleet
			continue
		}
		if m.down(ctx, err, r.log) {
			r.changed()
		}
	}
	if shrunk == len(failures) {
		return engine.Result{}, lastTooLong
	}
	if noLogprobs == len(failures) {
		return engine.Result{}, lastNoLogprobs
	}
	if full+noLogprobs == len(failures) {
		return engine.Result{}, fmt.Errorf("%w: every backend is busy: %s", engine.ErrQueueFull, strings.Join(failures, "; "))
	}
	if timedOut > 0 {
		return engine.Result{}, fmt.Errorf("%w: no backend sent a first token in time: %s", engine.ErrTimeout, strings.Join(failures, "; "))
	}
	return engine.Result{}, fmt.Errorf("%w: every backend failed: %s", engine.ErrUnavailable, strings.Join(failures, "; "))
}

// capStream caps the cached tokens of the events stream receives at c's
// own prefix.
func capStream(stream engine.StreamFunc, c candidate) engine.StreamFunc {
	if stream == nil {
		return nil
	}
	return func(ev engine.Event) error {
		ev.Timings.CachedTokens = c.capCached(ev.Timings)
		return stream(ev)
	}
}

// ForgetConversation deletes what the backends saved for a tenant's
// conversation (a kvwin node's KV snapshots) and returns how many held
// some. It asks every backend that can, healthy or not, and blocks on them.
func (r *Router) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	n := 0
	var errs []error
	for _, m := range r.members {
		if f, ok := m.backend.(engine.ConversationForgetter); ok {
			k, err := f.ForgetConversation(ctx, tenant, conversation)
			n += k
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			}
		}
	}
	return n, errors.Join(errs...)
}

// generateOn runs sub (req as sent to m) on m. A slot pin of the router's
// own that m refuses (a node restarted with fewer slots refuses the slot
// it no longer has) is the router's mistake, never the client's: m's slots
// are re-read, the pin forgotten and the turn run again unpinned, or, when
// the router isolates tenants on m (claimed is the turn's claim, nil
// otherwise), pinned to a slot claimed anew, reusing nothing.
func (r *Router) generateOn(ctx context.Context, m *member, k key, req, sub engine.Request, stream engine.StreamFunc, claimed *pin) (engine.Result, bool, error) {
	res, started, err := m.generate(ctx, sub, r.checkUsage(m, k, req, stream))
	if err == nil || started || sub.Slot < 0 || req.Slot >= 0 || !errors.Is(err, engine.ErrInvalidRequest) {
		if err == nil {
			res.Timings = r.saneTimings(m, k, req, res.Timings, res.Tokens)
		}
		return res, started, err
	}
	r.log.WarnContext(ctx, "backend refused the router's slot pin; re-reading its slots and retrying unpinned",
		"backend", m.name, "slot", sub.Slot, "err", err)
	if rerr := r.refresh(ctx, m, false); rerr != nil {
		r.log.WarnContext(ctx, "re-reading the backend's slots failed", "backend", m.name, "err", rerr)
	}
	_ = r.reg.Release(kvcache.Location{Backend: m.name, Slot: sub.Slot})
	sub.Slot = -1
	if claimed != nil {
		// Unpinned, the backend would choose a slot another tenant's turn
		// may be on its way to reuse (tenancy.go): claim one anew.
		m.settle(*claimed, -1, false)
		p, err := m.claim(ctx, claimed.tenant, -1, -1, 0, k.length)
		if err != nil {
			*claimed = pin{slot: -1}
			return engine.Result{}, false, err
		}
		*claimed = p
		sub.Slot, sub.NoCache = p.slot, true
	}
	res, started, err = m.generate(ctx, sub, r.checkUsage(m, k, req, stream))
	if err == nil {
		res.Timings = r.saneTimings(m, k, req, res.Timings, res.Tokens)
	}
	return res, started, err
}

// retryable says whether another backend may succeed where this one failed
// before answering.
func retryable(err error) bool {
	return errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrTimeout) ||
		errors.Is(err, engine.ErrQueueFull) || errors.Is(err, engine.ErrClosed)
}

// score predicts each live backend's time to first token.
func (r *Router) score(k key, live []*member) []candidate {
	held := map[string]kvcache.Match{}
	for _, chain := range []kvcache.Chain{k.exact, k.approx} {
		if len(chain.Keys) == 0 {
			continue
		}
		for _, mt := range r.reg.Lookup(chain).Matches {
			if cur, ok := held[mt.Backend]; !ok || mt.Blocks > cur.Blocks {
				held[mt.Backend] = mt
			}
		}
	}
	// A backend that has not measured itself yet borrows the cost model of
	// the peer that has measured most: same model, likely the same speed.
	// Its prior alone would make it look slower or faster than its measured
	// peers, and a router that never sends it a turn would never learn.
	var peer attention.Predictor
	most := 0
	for _, m := range live {
		if st := m.cal.Stats(); st.Fitted && st.Observations > most {
			peer, most = m.cal, st.Observations
		}
	}
	// Backends whose slots reuse only their own KV: each idle slot's hold,
	// and whether any slot of them is free (placement.go).
	plans := map[int][]slotPlan{}
	room := false
	for _, m := range live {
		if r.plansSlots(m) && len(k.exact.Keys) > 0 {
			plans[m.index] = r.slotPlans(m, k.exact, k.length)
			room = room || hasRoom(plans[m.index])
		}
	}
	cands := make([]candidate, 0, len(live))
	for _, m := range live {
		var cost attention.Predictor = m.cal
		if peer != nil && !m.cal.Stats().Fitted {
			cost = peer
		}
		c := candidate{index: m.index, name: m.name, load: int(m.load.Load()), slots: m.slotCount(), slot: -1}
		if mt, ok := held[m.name]; ok && mt.Approximate != m.exact {
			c.cached = min(mt.Length, k.length-1)
			c.own, c.ownOf = mt.Length, k.exact.Length
			if mt.Approximate {
				c.ownOf = k.approx.Length
			}
			if mt.Tier == kvcache.TierSlot {
				c.slot = mt.Slot
			}
		}
		extra := time.Duration(0)
		if plans, ok := plans[m.index]; ok {
			// Its slots reuse only their own KV: the slot the turn would
			// take, and what taking it destroys (placement.go).
			if m.restores.Load() {
				best := 0
				if mt, ok := held[m.name]; ok && mt.Approximate != m.exact {
					best = mt.Length
				}
				plans = restorable(plans, best, k.length)
			}
			p := bestPlan(plans, k.length, room)
			c.cached, c.slot, c.planned = p.reuse, p.slot, true
			if d := p.destroyed(room); d > 0 {
				extra = cost.Predict(d, 0)
			}
		}
		c.predicted = m.wait() + cost.Predict(max(k.length-c.cached, 1), c.cached) + extra
		c.slack = cost.Predict(r.cfg.TieTokens, 0)
		cands = append(cands, c)
	}
	return cands
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
		if r.plansSlots(m) && !m.restores.Load() && cached >= chain.Units(sharedKeys(prev, chain.Keys)+2) {
			// More than the slot held: the backend restored it from
			// elsewhere (placement.go).
			m.restores.Store(true)
			r.log.Info("backend restores prompts its slots gave up (a prompt cache); counting them as held there",
				"backend", m.name, "slot", slot, "reused", cached)
		}
		r.reg.Correct(loc, chain, cached)
		held := chain
		if !m.exact && res.Text != "" && k.text != "" {
			// The canonical rendering puts the answer where the next
			// turn's prompt continues, as the backend's KV holds it.
			held = k.approxKeyer.Text(k.text + res.Text)
		}
		if m.exact && len(res.Tokens) > 1 {
			// The last generated token was sampled, not computed into KV.
			held = k.keyer.Tokens(append(append([]int(nil), k.tokens...), res.Tokens[:len(res.Tokens)-1]...))
		}
		if disagrees(prev, chain, cached) {
			m.wantRead.Store(true) // the slot lost what the registry believed: read the others too
		}
		if (m.snapshots || m.restores.Load()) && len(prev) > 0 && !slices.Equal(prev, held.Keys[:min(len(prev), len(held.Keys))]) {
			m.remember(r.reg, kvcache.Chain{Keys: prev, Length: len(prev) * held.BlockSize, BlockSize: held.BlockSize, Approximate: held.Approximate})
		}
		r.reg.Record(loc, held)
		count := -1 // what the slot's KV holds now, if the answer's tokens say
		if m.exact && len(res.Tokens) > 1 {
			count = held.Length
		}
		m.noteTurn(slot, k.tenant, count)
	}
	t := res.Timings
	if t.PromptEval > 0 {
		m.cal.Observe(attention.Observation{New: max(t.PromptTokens-t.CachedTokens, 1), Context: t.CachedTokens, Elapsed: t.PromptEval})
	}
}
