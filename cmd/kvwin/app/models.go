package app

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/engine/llamacpp"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
	"kvwin/window"
)

// embeddedName is the backend name of every embedded engine (X-Kvwin-Backend,
// the backend label); models are told apart by the model label.
const embeddedName = "embedded"

// startCatalog builds the models of the configuration file: for each, its
// registry and window (an embedded one loads on first use), and the catalog
// serving them. It returns the windows by model and the first model's
// window (conversations are forgotten through it: all windows share the
// memory store).
func (a *App) startCatalog() (web.Windower, *window.Window, error) {
	if err := a.openStore(); err != nil {
		return nil, nil, err
	}
	c := &catalog{
		log: a.log, max: a.f.MaxLoadedModels, byName: map[string]*entry{}, changed: make(chan struct{}), now: time.Now,
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_model_loads_total",
			Help: "Embedded models loaded, by model."}, []string{"model"}),
		unloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_model_unloads_total",
			Help: "Embedded models unloaded (idle TTL, room for another under max_loaded_models, shutdown), by model."}, []string{"model"}),
	}
	a.metrics.MustRegister(c.loads, c.unloads)
	wins := &modelWindows{by: map[string]web.Windower{}}
	cols := map[*entry]prometheus.Collector{} // each loaded engine's collector; guarded by c.mu's hand-offs
	for i, spec := range a.f.Models {
		if _, dup := c.byName[spec.Name]; dup || spec.Name == "" {
			return nil, nil, fmt.Errorf("models[%d]: name %q is empty or used twice", i, spec.Name)
		}
		e := &entry{cat: c, spec: spec, state: web.ModelIdle}
		var fleet *router.Router // a remote entry's
		slots, ctx := firstNonZero(spec.Slots, a.f.Slots), firstNonZero(spec.Ctx, a.f.Ctx)
		if spec.Model != "" {
			abs, err := filepath.Abs(spec.Model)
			if err != nil {
				return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
			}
			e.spec.Model = abs
			// Loaded on first use, but checked now: a configuration whose
			// model cannot load is refused at start and by a reload, not
			// reported as served and then answered 503.
			if err := checkEmbedded(a.f, abs, slots, ctx); err != nil {
				return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
			}
			if e.reg, err = kvcache.New(kvcache.Config{Logger: a.log}); err != nil {
				return nil, nil, err
			}
			e.info = engine.Info{Name: embeddedName, Model: spec.Name, ContextSlot: ctx, Slots: slots, Snapshots: !a.f.NoSnapshots}
		} else {
			r, reg, err := a.openRouter(spec.Backends)
			if err != nil {
				return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
			}
			e.remote, e.reg, fleet = remoteModel{r}, reg, r
			e.info = r.Info()
			e.info.Model = spec.Name
			if c := fleetContext(r.Backends()); c > 0 {
				ctx = c
			}
		}
		if err := modelRegisterer(a.metrics, spec.Name).Register(kvcache.NewCollector(e.reg)); err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): metrics: %w", i, spec.Name, err)
		}
		budget := firstNonZero(spec.WindowBudget, a.f.WindowBudget, ctx-OutputReserve(ctx))
		w, err := a.newWindow(firstNonEmpty(spec.Window, a.f.Window), budget)
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
		}
		e.win = w
		wins.by[spec.Name] = w
		if fleet != nil && spec.WindowBudget == 0 && a.f.WindowBudget == 0 {
			// Backends unreachable now report their context when they join.
			wins.by[spec.Name] = a.followWindow(w, firstNonEmpty(spec.Window, a.f.Window), func() int { return fleetContext(fleet.Backends()) })
		}
		c.entries = append(c.entries, e)
		c.byName[spec.Name] = e
	}
	wins.def = wins.by[c.entries[0].spec.Name]

	queue := a.f.Queue
	if queue == 0 {
		queue = -1 // the engine's "none wait"; its 0 means "default"
	}
	c.snapshotDir = func(e *entry) string {
		if a.f.NoSnapshots || e.remote != nil {
			return ""
		}
		return filepath.Join(a.f.DataDir, "snapshots", url.PathEscape(e.spec.Name))
	}
	c.snapshotTTL, c.snapshotNow = a.f.MemoryTTL, a.f.Now
	if c.snapshotNow == nil {
		c.snapshotNow = time.Now
	}
	c.open = func(e *entry) (*llamacpp.Engine, error) {
		eng, err := llamacpp.New(llamacpp.Config{
			ModelPath: e.spec.Model, ModelID: e.spec.Name, Name: embeddedName, Slots: e.info.Slots, Ctx: e.info.ContextSlot,
			Threads: a.f.Threads, Batch: a.f.Batch, Queue: queue, Registry: e.reg, SnapshotDir: c.snapshotDir(e), SnapshotMaxBytes: a.f.SnapshotBytes,
			SnapshotTTL: a.f.MemoryTTL, Now: a.f.Now,
		}, a.log)
		if err != nil {
			return nil, err
		}
		col := eng.Collector()
		if err := modelRegisterer(a.metrics, e.spec.Name).Register(col); err != nil {
			a.log.Warn("model metrics not registered", "model", e.spec.Name, "err", err)
		} else {
			c.mu.Lock()
			cols[e] = col
			c.mu.Unlock()
		}
		return eng, nil
	}
	c.onUnload = func(e *entry, _ *llamacpp.Engine) {
		c.mu.Lock()
		col := cols[e]
		delete(cols, e)
		c.mu.Unlock()
		if col != nil {
			modelRegisterer(a.metrics, e.spec.Name).Unregister(col)
		}
		e.reg.RemoveBackend(embeddedName)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx)
	}()
	a.closers = append(a.closers, func() {
		cancel()
		<-done
		c.close()
	})
	a.catalog, a.backend, a.reg = c, c, c.entries[0].reg
	return wins, c.entries[0].win, nil
}

// modelRegisterer registers a model's collectors with its model label.
func modelRegisterer(reg prometheus.Registerer, model string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"model": model}, reg)
}

// firstNonZero returns the first non-zero value.
func firstNonZero(vals ...int) int {
	for _, v := range vals {
		if v != 0 {
			return v
		}
	}
	return 0
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// modelWindows keeps each model's window (web.ModelWindows).
type modelWindows struct {
	def web.Windower
	by  map[string]web.Windower
}

var _ web.ModelWindows = (*modelWindows)(nil)

// Build builds with the first model's window.
func (m *modelWindows) Build(ctx context.Context, req window.Request) (window.Result, error) {
	return m.def.Build(ctx, req)
}

// For is the window of model; the first model's for an unknown name (the
// generation then fails on the name).
func (m *modelWindows) For(model string) web.Windower {
	if w, ok := m.by[model]; ok {
		return w
	}
	return m.def
}

// remoteModel is a router serving one model entry: requests reach it
// without the entry's name, which is kvwin's, not the backends'.
type remoteModel struct{ engine.Backend }

// Generate serves req with the backends' own model.
func (r remoteModel) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	req.Model = ""
	return r.Backend.Generate(ctx, req, fn)
}

// Ready is the router's readiness.
func (r remoteModel) Ready() error {
	if rd, ok := r.Backend.(interface{ Ready() error }); ok {
		return rd.Ready()
	}
	return nil
}
