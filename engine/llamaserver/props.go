package llamaserver

import (
	"context"
	"net/http"

	"kvwin/engine"
)

// Props are what a server says about itself in GET /props.
type Props struct {
	Slots        int    // total_slots: requests served in parallel
	ContextSlot  int    // default_generation_settings.n_ctx: tokens per slot
	ChatTemplate string // chat_template: the model's Jinja template
	ModelPath    string // model_path: the model file, as the server names it
	ModelAlias   string // model_alias: the --alias, if the server has one
	Snapshots    bool   // kvwin_snapshots: a kvwin node restoring evicted slots from disk
	Tenants      bool   // kvwin_tenants: a kvwin node keeping the tenants this caller names apart
}

// propsBody is the part of llama-server's /props answer kvwin reads.
type propsBody struct {
	// EndpointSlots is sent by servers whose /slots counts each slot's
	// tokens (llama-server since mid-2025); its value says whether /slots
	// is on.
	EndpointSlots *bool `json:"endpoint_slots"`

	TotalSlots                int `json:"total_slots"`
	DefaultGenerationSettings struct {
		NCtx int `json:"n_ctx"`
	} `json:"default_generation_settings"`
	ChatTemplate string `json:"chat_template"`
	ModelPath    string `json:"model_path"`
	ModelAlias   string `json:"model_alias"`
	Snapshots    bool   `json:"kvwin_snapshots"`
	Tenants      bool   `json:"kvwin_tenants"`
}

// LoadProps reads the server's /props and makes them the backend's: Info
// reports them and requests are checked against them. A router's health
// check calls it to notice a server restarted with another model, context
// or template. It blocks for at most Config.Timeout (plus the wait for a
// load already running).
func (b *Backend) LoadProps(ctx context.Context) (Props, error) {
	if err := b.lock(ctx); err != nil {
		return Props{}, err
	}
	defer b.unlock()
	return b.loadProps(ctx)
}

// loadProps is LoadProps with the load token held. The chat setup is kept
// when what it depends on (model and template) did not change.
func (b *Backend) loadProps(ctx context.Context) (Props, error) {
	const path = "/props"
	var body propsBody
	if err := b.call(ctx, http.MethodGet, path, nil, &body); err != nil {
		return Props{}, err
	}
	p := Props{
		Slots: body.TotalSlots, ContextSlot: body.DefaultGenerationSettings.NCtx,
		ChatTemplate: body.ChatTemplate, ModelPath: body.ModelPath, ModelAlias: body.ModelAlias,
		Snapshots: body.Snapshots, Tenants: body.Tenants,
	}
	// A server that reports no slots or no context cannot be planned for;
	// treat it as one that did not answer rather than divide by its zeros.
	op := http.MethodGet + " " + b.base + path
	switch {
	case p.Slots < 1:
		return Props{}, unavailable(op, "total_slots is %d", p.Slots)
	case p.ContextSlot < 1:
		return Props{}, unavailable(op, "default_generation_settings.n_ctx is %d", p.ContextSlot)
	}
	if body.EndpointSlots != nil {
		b.slotCounts.Store(true)
	}
	st := &state{props: p}
	if old := b.snapshot(); old != nil && old.chat != nil &&
		old.props.ChatTemplate == p.ChatTemplate && old.props.ModelPath == p.ModelPath {
		st.chat = old.chat
	}
	b.publish(st)
	return p, nil
}

var _ engine.Refresher = (*Backend)(nil)

// Refresh re-reads the server's /props (see LoadProps): a router calls it
// when a backend rejoins, or refused a slot it believed existed, to plan
// for the server as it is now (a node restarted with fewer slots).
func (b *Backend) Refresh(ctx context.Context) error {
	_, err := b.LoadProps(ctx)
	return err
}
