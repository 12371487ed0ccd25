package app

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/cmd/kvwin/config"
	"kvwin/engine"
	"kvwin/engine/catalog"
	"kvwin/engine/llamacpp"
	"kvwin/engine/queue"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
	"kvwin/window"
)

// embeddedName is the backend name of every embedded engine (X-Kvwin-Backend,
// the backend label); models are told apart by the model label.
const embeddedName = "embedded"

// modelRegistry is one configured model's block registry (its own
// namespace, kept across loads), for the dashboard.
type modelRegistry struct {
	name string
	reg  *kvcache.Registry
}

// startCatalog builds the models of the configuration file: for each, its
// registry and window (an embedded one loads on first use), and the catalog
// serving them. It returns the windows by model and the first model's
// window (conversations are forgotten through it: all windows share the
// memory store).
func (a *App) startCatalog() (web.Windower, *window.Window, error) {
	if err := a.openStore(); err != nil {
		return nil, nil, err
	}
	wins := &modelWindows{by: map[string]web.Windower{}}
	var models []catalog.Model
	var firstWin *window.Window
	regs := map[string]*kvcache.Registry{}
	for i, spec := range a.f.Models {
		if _, dup := regs[spec.Name]; dup || spec.Name == "" {
			return nil, nil, fmt.Errorf("models[%d]: name %q is empty or used twice", i, spec.Name)
		}
		m, reg, fleet, ctx, err := a.catalogModel(i, spec)
		if err != nil {
			return nil, nil, err
		}
		if err := modelRegisterer(a.metrics, spec.Name).Register(kvcache.NewCollector(reg)); err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): metrics: %w", i, spec.Name, err)
		}
		budget := firstNonZero(spec.WindowBudget, a.f.WindowBudget, ctx-OutputReserve(ctx))
		w, err := a.newWindow(firstNonEmpty(spec.Window, a.f.Window), budget)
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
		}
		wins.by[spec.Name] = w
		if fleet != nil && spec.WindowBudget == 0 && a.f.WindowBudget == 0 {
			// Backends unreachable now report their context when they join.
			wins.by[spec.Name] = a.followWindow(w, firstNonEmpty(spec.Window, a.f.Window), func() int { return fleetContext(fleet.Backends()) })
		}
		if i == 0 {
			firstWin = w
		}
		models = append(models, m)
		regs[spec.Name] = reg
		a.models = append(a.models, modelRegistry{spec.Name, reg})
	}
	wins.def = wins.by[models[0].Name]

	c, err := catalog.New(catalog.Config{
		Models: models, MaxLoaded: a.f.MaxLoadedModels, Open: a.openEmbedded(regs),
		SnapshotTTL: a.f.MemoryTTL, SnapshotNow: a.f.Now, Metrics: a.metrics, Log: a.log,
	})
	if err != nil {
		return nil, nil, err
	}
	a.runCatalog(c)
	a.catalog, a.backend, a.reg = c, c, regs[models[0].Name]
	return wins, firstWin, nil
}

// catalogModel describes models[i] to the catalog: an embedded model,
// checked now and loaded on first use, with a registry of its own, or a
// remote one, whose router (fleet) it opens. ctx is the model's context per
// slot.
func (a *App) catalogModel(i int, spec config.Model) (m catalog.Model, reg *kvcache.Registry, fleet *router.Router, ctx int, err error) {
	m = catalog.Model{Name: spec.Name, TTL: time.Duration(spec.TTL)}
	slots, ctx := firstNonZero(spec.Slots, a.f.Slots), firstNonZero(spec.Ctx, a.f.Ctx)
	if spec.Model == "" {
		r, rreg, err := a.openRouter(spec.Backends)
		if err != nil {
			return m, nil, nil, 0, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
		}
		m.Remote = r
		m.Source = strings.Join(spec.Backends, " ")
		m.Info = r.Info()
		m.Info.Model = spec.Name
		if c := fleetContext(r.Backends()); c > 0 {
			ctx = c
		}
		return m, rreg, r, ctx, nil
	}
	abs, err := filepath.Abs(spec.Model)
	if err != nil {
		return m, nil, nil, 0, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
	}
	m.Source = abs
	// Loaded on first use, but checked now: a configuration whose
	// model cannot load is refused at start and by a reload, not
	// reported as served and then answered 503.
	if err := checkEmbedded(a.f, abs, slots, ctx); err != nil {
		return m, nil, nil, 0, fmt.Errorf("models[%d] (%s): %w", i, spec.Name, err)
	}
	if reg, err = kvcache.New(kvcache.Config{Logger: a.log}); err != nil {
		return m, nil, nil, 0, err
	}
	m.Info = engine.Info{Name: embeddedName, Model: spec.Name, ContextSlot: ctx, Slots: slots, Snapshots: !a.f.NoSnapshots}
	if !a.f.NoSnapshots {
		m.SnapshotDir = filepath.Join(a.f.DataDir, "snapshots", url.PathEscape(spec.Name))
	}
	return m, reg, nil, ctx, nil
}

// openEmbedded is the catalog's factory of embedded engines: each model's
// engine records its blocks in the model's registry (regs) and registers
// its metrics with the model's label.
func (a *App) openEmbedded(regs map[string]*kvcache.Registry) func(catalog.Model) (catalog.Engine, error) {
	queueLen := a.f.Queue
	if queueLen == 0 {
		queueLen = -1 // the engine's "none wait"; its 0 means "default"
	}
	return func(m catalog.Model) (catalog.Engine, error) {
		reg := regs[m.Name]
		eng, err := llamacpp.New(llamacpp.Config{
			ModelPath: m.Source, ModelID: m.Name, Name: embeddedName, Slots: m.Info.Slots, Ctx: m.Info.ContextSlot,
			Order: queue.Config{FIFO: a.f.QueueOrder == QueueFIFO}, InteractiveSlots: a.f.InteractiveSlots,
			Threads: a.f.Threads, Batch: a.f.Batch, Seed: seed(a.f.Seed), Queue: queueLen, Registry: reg, SnapshotDir: m.SnapshotDir, SnapshotMaxBytes: a.f.SnapshotBytes,
			SnapshotRAMBytes: kvRAMBytes(a.f.KVRAM), SnapshotTenantShare: kvRAMShare(a.f.KVRAMTenantPercent),
			SnapshotTTL: a.f.MemoryTTL, Now: a.f.Now,
		}, a.log)
		if err != nil {
			return nil, err
		}
		me := &modelEngine{Engine: eng, reg: reg}
		col := eng.Collector()
		if err := modelRegisterer(a.metrics, m.Name).Register(col); err != nil {
			a.log.Warn("model metrics not registered", "model", m.Name, "err", err)
		} else {
			me.unregister = func() { modelRegisterer(a.metrics, m.Name).Unregister(col) }
		}
		return me, nil
	}
}

// runCatalog runs c's loop (TTL unloads) until the App closes, then closes c.
func (a *App) runCatalog(c *catalog.Catalog) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	a.closers = append(a.closers, func() {
		cancel()
		<-done
		c.Close()
	})
}

// modelEngine is an embedded model's engine as the catalog holds it:
// closing it also drops its metrics and its blocks from the model's
// registry (which outlives it, for the next load).
type modelEngine struct {
	*llamacpp.Engine
	reg        *kvcache.Registry
	unregister func() // nil if its metrics were not registered
}

var _ catalog.Engine = (*modelEngine)(nil)

// Close closes the engine, then forgets it. It blocks until it is closed.
func (m *modelEngine) Close() error {
	err := m.Engine.Close()
	if m.unregister != nil {
		m.unregister()
	}
	m.reg.RemoveBackend(embeddedName)
	return err
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
