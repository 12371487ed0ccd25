package app

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/engine/catalog"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
)

// Status is GET /kvwin/v1/status, what the dashboard draws besides the
// traffic: every backend with its slots and KV, every model with its
// state, and the latest routing decisions.
type Status struct {
	Models   []web.ModelStatus `json:"models"`
	Backends []BackendView     `json:"backends"`
	Routing  []router.Decision `json:"routing"`
}

// BackendView is one backend: its health, load, slots, KV in use and the
// share of prompt blocks it reused (hits over hits and misses).
type BackendView struct {
	Model          string             `json:"model"`
	Name           string             `json:"name"`
	Kind           string             `json:"kind"` // embedded or remote
	Healthy        bool               `json:"healthy"`
	Suspect        bool               `json:"suspect,omitempty"`
	InFlight       int                `json:"in_flight"`
	Slots          []engine.SlotState `json:"slots"`
	KVTokens       int                `json:"kv_tokens"` // held in its slots now
	KVCapacity     int                `json:"kv_capacity"`
	BlocksHeld     int                `json:"blocks_held"`
	CapacityBlocks int                `json:"capacity_blocks"`
	CachedShare    float64            `json:"cached_share"`
	// Residency says how a remote backend's KV residency is known:
	// "read" from its /slots, "learned" from turns alone (it does not
	// serve /slots), "" not read yet.
	Residency string `json:"residency,omitempty"`
	// ResidencyNote says it in words where it is learned, not read.
	ResidencyNote string `json:"residency_note,omitempty"`
}

// slotsTimeout bounds asking remote backends for their slots: the
// dashboard polls every 2 s, so an answer must come well within that.
const slotsTimeout = time.Second

// status assembles the dashboard's view. Remote backends are asked for
// their slots at once, for at most slotsTimeout; one that does not answer
// shows what was last learned.
func (a *App) status(ctx context.Context) Status {
	st := Status{Backends: []BackendView{}, Routing: a.decisions.recent()}
	switch {
	case a.catalog != nil:
		st.Models = a.catalog.Models()
		for _, m := range a.models {
			b, release, ok := a.catalog.Peek(m.name)
			if !ok {
				continue
			}
			st.Backends = append(st.Backends, backendViews(ctx, m.name, b, m.reg)...)
			release()
		}
	default:
		info := a.backend.Info()
		st.Models = []web.ModelStatus{{Name: info.Model, State: catalog.Loaded, Info: info, Source: a.f.Model}}
		if a.router != nil {
			st.Models[0].State, st.Models[0].Source = catalog.Remote, strings.Join(a.f.Backends, " ")
		}
		st.Backends = backendViews(ctx, info.Model, a.backend, a.reg)
	}
	return st
}

// backendViews lists the backends behind b: a router's members, or b.
func backendViews(ctx context.Context, model string, b engine.Backend, reg *kvcache.Registry) []BackendView {
	stats := map[string]kvcache.BackendStats{}
	if reg != nil {
		for _, s := range reg.Snapshot().Backends {
			stats[s.Name] = s
		}
	}
	view := func(name, kind string, be engine.Backend) BackendView {
		v := BackendView{Model: model, Name: name, Kind: kind, Healthy: true, Slots: []engine.SlotState{}}
		if rep, ok := engine.As[engine.SlotReporter](be); ok {
			if slots := rep.Slots(); slots != nil {
				v.Slots = slots
			}
		}
		for _, s := range v.Slots {
			v.KVTokens += s.Tokens
			v.KVCapacity += s.Context
			if s.Processing {
				v.InFlight++
			}
		}
		if s, ok := stats[name]; ok {
			v.BlocksHeld, v.CapacityBlocks = s.BlocksHeld, s.CapacityBlocks
			if s.Hits+s.Misses > 0 {
				v.CachedShare = float64(s.Hits) / float64(s.Hits+s.Misses)
			}
		}
		return v
	}
	r, ok := engine.As[*router.Router](b) // a remote model's router
	if !ok {
		return []BackendView{view(b.Info().Name, "embedded", b)}
	}
	members := r.Backends()
	fctx, cancel := context.WithTimeout(ctx, slotsTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		if f, ok := engine.As[engine.SlotFetcher](m); ok {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = f.FetchSlots(fctx) // kept for Slots; on error view shows what was last learned
			}()
		}
	}
	wg.Wait()
	byName := map[string]engine.Backend{}
	for _, m := range members {
		byName[m.Info().Name] = m
	}
	var out []BackendView
	for _, s := range r.Status() {
		m, ok := byName[s.Name]
		if !ok {
			continue // joined or left since members was read
		}
		v := view(s.Name, "remote", m)
		v.Healthy, v.Suspect, v.InFlight, v.Residency = s.Healthy, s.Suspect, s.InFlight, s.Residency
		if s.Residency == router.ResidencyLearned {
			v.ResidencyNote = "residency learned, not read: the backend does not serve /slots"
		}
		out = append(out, v)
	}
	return out
}

// decisionsSize is how many routing decisions the dashboard may show.
const decisionsSize = 64

// decisionLog keeps the latest routing decisions and counts them. Safe
// for concurrent use.
type decisionLog struct {
	decisions *prometheus.CounterVec
	failovers *prometheus.CounterVec

	mu   sync.Mutex
	ring []router.Decision
	next int
}

func newDecisionLog() *decisionLog {
	return &decisionLog{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_router_decisions_total",
			Help: "Routed turns, by the backend ranked first and the one that answered (\"\" if none did)."}, []string{"first", "chosen"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_router_failovers_total",
			Help: "Backends a turn left for the next one after they failed, by the backend that failed."}, []string{"backend"}),
		ring: make([]router.Decision, 0, decisionsSize),
	}
}

// observe records one decision (router.Config.Observe).
func (d *decisionLog) observe(dec router.Decision) {
	d.decisions.WithLabelValues(dec.First, dec.Chosen).Inc()
	for _, f := range dec.Failed {
		d.failovers.WithLabelValues(f).Inc()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ring) < decisionsSize {
		d.ring = append(d.ring, dec)
		return
	}
	d.ring[d.next] = dec
	d.next = (d.next + 1) % decisionsSize
}

// recent returns the decisions oldest first.
func (d *decisionLog) recent() []router.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append(append([]router.Decision{}, d.ring[d.next:]...), d.ring[:d.next]...)
}
