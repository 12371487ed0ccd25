package window

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/internal/ident"
	"kvwin/window/memory"
)

// Store is the durable memory of named conversations (memory.Store
// implements it). Its methods block on disk and are safe for concurrent
// use.
type Store interface {
	// Ingest stores turns idempotently, each on its chain (Turn.Parent):
	// a turn already stored on the same chain is kept, a disagreeing one
	// starts a branch. It keeps none of the slice past its return (the
	// window reuses it).
	Ingest(ctx context.Context, key memory.Key, turns []memory.Turn) (int, error)
	// Search retrieves for q among the conversation's stored turns on
	// q.Chain; each hit's Cost is q.Cost of its Turn (the window sums
	// them, memory.Index.Search sets them).
	Search(ctx context.Context, key memory.Key, q memory.Query) ([]memory.Hit, error)
	// Delete removes the conversation's stored turns; false if it held
	// none.
	Delete(ctx context.Context, key memory.Key) (bool, error)
}

// StoreExpirer is a Store that deletes the conversations not used for its
// TTL (memory.Store's --memory-ttl): Expire does so now and returns how
// many. It blocks on disk.
type StoreExpirer interface {
	Expire(ctx context.Context) (int, error)
}

// StoreMetrics is a Store that counts its own failures: Collector returns
// a Prometheus collector of them. Safe to call concurrently.
type StoreMetrics interface {
	Collector() prometheus.Collector
}

// StoreAfter is a Store that takes a history's evicted turns after those
// it stored before (memory.Store.IngestAfter): held is false, and nothing
// stored, when it no longer holds the first of them.
type StoreAfter interface {
	IngestAfter(ctx context.Context, key memory.Key, turns []memory.Turn) (n int, held bool, err error)
}

var (
	_ StoreAfter   = (*memory.Store)(nil)
	_ Store        = (*memory.Store)(nil)
	_ StoreExpirer = (*memory.Store)(nil)
	_ StoreMetrics = (*memory.Store)(nil)
)

// Config configures a Window.
type Config struct {
	// Policy is the default policy (Policies()); default memory.
	Policy string
	// Settings of the cut rule; Budget is required.
	Settings Settings
	// PacketBytes bounds the packets kept for reuse (the send-once
	// ledger's memo) by the bytes their turns hold; default
	// DefaultPacketBytes.
	PacketBytes int64
	// IndexBytes bounds the in-memory indexes kept for conversations
	// served from their own turns (unnamed ones, and named ones while the
	// store fails) by memory.Index.Bytes; default DefaultIndexBytes. An
	// index dropped is built again from the next request's turns.
	IndexBytes int64
}

// DefaultPacketBytes is Config.PacketBytes's default, 16 MiB: a packet is
// sized by its ask (a few kilobytes), so thousands fit, as the 4,096
// packets this bound replaced.
const DefaultPacketBytes = 16 << 20

// DefaultIndexBytes is Config.IndexBytes's default, 256 MiB. The rule: the
// index of the largest conversation an open issue sends whole fits
// (100,000 short turns: about 200 MB by memory.Index.Bytes), as do those
// of a 2,000-turn conversation many times over.
const DefaultIndexBytes = 256 << 20

// Window builds the window of each request. Safe for concurrent use.
type Window struct {
	cfg      Config
	policies map[string]cutter
	store    Store
	packets  *memo[uint64, Packet]
	indexes  *memo[uint64, *memory.Index]
	replays  *replays
	ingested *memo[memory.Key, ingestMark]
	resumed  atomic.Int64 // replays gone on from a mark (tests read it)
	// chains remembers the prefix hashes of recent long histories
	// (linkNext), each once the cut found it valid: a turn that continues
	// one hashes, and checks, only what is new.
	chains engine.Chains[uint64]
}

// Delete removes key's conversation from the store and drops every packet
// the window memoized for it. It reports whether the store held anything.
// Without a store it only drops the packets and reports false.
func (w *Window) Delete(ctx context.Context, key memory.Key) (bool, error) {
	w.packets.drop(key)
	w.indexes.drop(key)
	w.replays.drop(key)
	w.ingested.drop(key)
	if w.store == nil {
		return false, nil
	}
	ok, err := w.store.Delete(ctx, key)
	if err != nil {
		return false, fmt.Errorf("memory store: delete %s: %w", key, err)
	}
	w.packets.drop(key) // a request racing the delete may have put some back
	w.indexes.drop(key)
	w.replays.drop(key)
	w.ingested.drop(key)
	return ok, nil
}

// New returns a Window. store may be nil: named conversations are then
// served from their own turns, like unnamed ones.
func New(cfg Config, store Store) (*Window, error) {
	if cfg.Policy == "" {
		cfg.Policy = PolicyMemory
	}
	if cfg.PacketBytes == 0 {
		cfg.PacketBytes = DefaultPacketBytes
	}
	if cfg.IndexBytes == 0 {
		cfg.IndexBytes = DefaultIndexBytes
	}
	cfg.Settings = cfg.Settings.Defaults()
	if cfg.PacketBytes < 0 || cfg.IndexBytes < 0 {
		return nil, fmt.Errorf("%w: packet bytes %d, index bytes %d: must not be negative", ErrSettings, cfg.PacketBytes, cfg.IndexBytes)
	}
	w := &Window{cfg: cfg, policies: map[string]cutter{}, store: store,
		packets: newMemo[uint64](cfg.PacketBytes, packetBytes), indexes: newMemo[uint64](cfg.IndexBytes, (*memory.Index).Bytes),
		replays: newMemo[replayKey](DefaultReplayBytes, replayBytes), ingested: newMemo[memory.Key](ingestedBytes, ingestMarkBytes)}
	for _, name := range Policies() {
		p, err := newCutter(name, cfg.Settings)
		if err != nil {
			return nil, err
		}
		w.policies[name] = p
	}
	if _, ok := w.policies[cfg.Policy]; !ok {
		return nil, fmt.Errorf("default policy %q: %w", cfg.Policy, ErrUnknownPolicy)
	}
	return w, nil
}

// Request is one chat request as the window sees it.
type Request struct {
	// Owner names a durable conversation; an empty Conversation is unnamed
	// and never touches the store.
	ident.Owner
	// Policy overrides the default policy for this request ("" keeps it).
	Policy   string
	Messages []engine.Message
	// Count counts a message's tokens; nil means ApproxCount.
	Count Counter
	// CountKey names Count (a tokenizer and template): a conversation's
	// store remembers the counts of the turns its packets may quote under
	// it, from one request to the next (memory.Query.CostKey). Empty:
	// counted again on every request.
	CountKey string
	// Limit is the most tokens the window may take when its newest
	// message (with the system messages and the rest of its unit) passes
	// the budget: the slot's context less the request's max_tokens. Zero
	// means the budget. Only sink and memory read it.
	Limit int
}

// Result is the window of one request.
type Result struct {
	Cut
	// Messages is what to send: sinks, then kept messages with packets
	// prepended to their asks. The server adds Cut.SinkPad padding tokens
	// after the sinks when it can place tokens (see docs/window.md).
	Messages []engine.Message
	// Packets are the packets in the window, by ask.
	Packets []Packet
	// PacketTurns and PacketTokens count what the packets add.
	PacketTurns, PacketTokens int
	// Degraded is set when the store failed: the packets were built from
	// the request's own turns instead. Log it; the request is still good.
	Degraded error
}

// PromptTokens is the window's size by the request's counter: kept tokens
// (with padding) plus packets.
func (r Result) PromptTokens() int { return r.KeptTokens + r.PacketTokens }

// Build cuts req's conversation and assembles its window. It blocks on the
// store for named conversations under the memory policy; errors are
// ErrInvalidMessage, ErrNoMessages, ErrUnknownPolicy or a *TooLongError,
// never a store failure (that degrades, see Result.Degraded).
func (w *Window) Build(ctx context.Context, req Request) (Result, error) {
	name := req.Policy
	if name == "" {
		name = w.cfg.Policy
	}
	pol, ok := w.policies[name]
	if !ok {
		return Result{}, fmt.Errorf("%q (want one of %v): %w", name, Policies(), ErrUnknownPolicy)
	}
	count := req.Count
	if count == nil {
		count = ApproxCount
	}
	// The messages a list this owner sent before (and the cut found valid)
	// begins with are not checked again: a long conversation resends its
	// history every turn.
	checked := w.chains.Same(req.Owner.Tenant, 0, req.Messages, linkNext)
	rk, remembered := newReplayKey(req, name)
	var r *resume
	if remembered {
		r = w.resumeFor(rk, req.Messages)
	}
	cut, err := pol.cutWithin(req.Messages, count, req.Limit, checked, r)
	if err != nil {
		return Result{}, err
	}
	if remembered {
		w.remember(rk, req.Messages, r)
	}
	res := Result{Cut: cut}
	var packets map[int]Packet
	switch {
	case len(cut.Asks) > 0:
		// Found valid, the list is remembered with its prefix hashes,
		// which the packets' keys and the store's branches need.
		prefix := w.chains.Keys(req.Owner.Tenant, 0, req.Messages, linkNext)
		packets, res.Degraded = w.buildPackets(ctx, req, cut, prefix, count, nil)
	case checked < len(req.Messages) && len(req.Messages) >= engine.MinChainMessages:
		// Remembered as valid; a shorter list is not remembered, and a
		// turn without packets needs no hashes.
		w.chains.Keys(req.Owner.Tenant, 0, req.Messages, linkNext)
	}
	res.Messages = make([]engine.Message, 0, cut.Sinks+cut.Messages-cut.Start)
	excerpts := cut.Excerpts
	at := func(i int) engine.Message {
		for len(excerpts) > 0 && excerpts[0].Pos < i {
			excerpts = excerpts[1:]
		}
		if len(excerpts) > 0 && excerpts[0].Pos == i {
			return excerptOf(req.Messages[i], i, excerpts[0].Tokens, cut.ExcerptRoom)
		}
		return req.Messages[i]
	}
	for i := 0; i < cut.Sinks; i++ {
		res.Messages = append(res.Messages, at(i))
	}
	for _, i := range cut.Carried {
		res.Messages = append(res.Messages, req.Messages[i])
	}
	for i := cut.Start; i < cut.Messages; i++ {
		m := at(i)
		if p, ok := packets[i]; ok && len(p.Turns) > 0 {
			m.Content = render(p, m.Content)
			res.Packets = append(res.Packets, p)
			res.PacketTurns += len(p.Turns)
			res.PacketTokens += p.Tokens
		}
		res.Messages = append(res.Messages, m)
	}
	return res, nil
}

// buildPackets builds (or recalls) the packet of every ask since the step,
// in order, each seeing the packets before it; prefix[i] is the chain of
// the request's first i messages (linkNext). explain, if set, is given the
// query of the latest ask and the source it searches (Explain).
func (w *Window) buildPackets(ctx context.Context, req Request, cut Cut, prefix []uint64, count Counter, explain func(*source, memory.Query)) (map[int]Packet, error) {
	msgs := req.Messages
	key := req.Owner
	src := w.source(ctx, req, cut, prefix)

	frame, lines := frameCost(count), lineCost(count)
	used := 0 // packet tokens so far since the step
	// The turns in view, built in room reused from request to request (as
	// the evicted turns are, source): with its packets' turns a late
	// question's window outgrew a list of the kept messages' length every
	// turn. A search only reads it.
	buf := turnsRoom.Get().(*[]memory.Turn)
	window := (*buf)[:0]
	defer func() {
		clear(window) // hold no texts in the pool
		*buf = window[:0]
		turnsRoom.Put(buf)
	}()
	for i := 0; i < cut.Sinks; i++ {
		window = append(window, turnAt(msgs, prefix, i))
	}
	for _, i := range cut.Carried {
		window = append(window, turnAt(msgs, prefix, i))
	}
	next := cut.Start
	out := map[int]Packet{}
	for k, a := range cut.Asks {
		// Room reserved for asks so far, less what their packets took:
		// room an ask left unused carries forward to later asks.
		room := (k+1)*cut.PacketRoom - used - frame
		for ; next <= a; next++ {
			window = append(window, turnAt(msgs, prefix, next))
		}
		id := packetKey(key, cut, prefix[a+1], req.CountKey)
		q := memory.Query{Ask: msgs[a].Content, Asker: engine.RoleUser, Before: cut.Start, Chain: prefix,
			Window: window, K: w.cfg.Settings.K, Tokens: room, FirstTokens: cut.PacketFree - frame, Cost: lines, CostKey: req.CountKey,
			FillTokens: cmp.Or(cut.FillRoom, w.cfg.Settings.fillTokens()), Statement: !isQuestion(msgs[a].Content)}
		if explain != nil && k == len(cut.Asks)-1 && room > 0 {
			explain(src, q)
		}
		p, ok := w.packets.get(id)
		if !ok {
			if room <= 0 {
				continue
			}
			hits, err := src.search(q)
			if err != nil {
				continue // src has recorded the failure
			}
			sort.SliceStable(hits, func(i, j int) bool { return hits[i].Pos < hits[j].Pos })
			p = Packet{Ask: a, Turns: make([]memory.Turn, len(hits))}
			for i, h := range hits {
				p.Turns[i] = h.Turn
				p.Tokens += h.Cost
			}
			if len(hits) > 0 {
				p.Tokens += frame
			}
			if src.err == nil {
				w.packets.put(id, key, p)
			}
		}
		out[a] = p
		window = append(window, p.Turns...)
		used += p.Tokens
	}
	return out, src.err
}

// source is where one request's packets come from: the store for a named
// conversation, else (or once the store fails) an index of the request's
// own evicted turns. err records the first store failure.
type source struct {
	ctx   context.Context
	store Store
	key   memory.Key
	index func() *memory.Index
	err   error
}

func (w *Window) source(ctx context.Context, req Request, cut Cut, prefix []uint64) *source {
	src := &source{ctx: ctx, key: req.Owner}
	src.index = func() *memory.Index { return w.index(src.key, req.Messages, cut, prefix) }
	if req.Conversation == "" || w.store == nil {
		return src
	}
	// The evicted turns are built in room reused from request to request:
	// a long history evicts thousands, every turn, and the store keeps
	// none of the slice (it copies what is new).
	buf := turnsRoom.Get().(*[]memory.Turn)
	evicted, err := w.ingest(ctx, req.Owner, req.Messages, cut, prefix, (*buf)[:0])
	clear(evicted) // hold no texts in the pool
	*buf = evicted[:0]
	turnsRoom.Put(buf)
	if err != nil {
		src.err = fmt.Errorf("memory store: ingest %s: %w", src.key, err)
		return src
	}
	src.store = w.store
	return src
}

// ingest stores the request's evicted turns, built in room: only those
// after the ones this conversation's previous request stored, where that
// request's evicted turns begin this one's and the store still holds them
// (StoreAfter), else all of them. It returns the room as used.
func (w *Window) ingest(ctx context.Context, key memory.Key, msgs []engine.Message, cut Cut, prefix []uint64, room []memory.Turn) ([]memory.Turn, error) {
	evicted := func(from int) []memory.Turn {
		room = room[:0]
		for i := from; i < cut.Start; i++ {
			room = append(room, turnAt(msgs, prefix, i))
		}
		return room
	}
	held := false
	var err error
	if after, ok := w.store.(StoreAfter); ok {
		if from := w.ingestedFrom(key, cut, prefix); from > cut.Sinks {
			_, held, err = after.IngestAfter(ctx, key, evicted(from))
		}
	}
	if err == nil && !held {
		_, err = w.store.Ingest(ctx, key, evicted(cut.Sinks))
	}
	if err == nil && cut.Start > cut.Sinks {
		w.ingested.put(key, key, ingestMark{sinks: cut.Sinks, start: cut.Start, chain: prefix[cut.Start], bytes: len(key.Tenant) + len(key.Conversation)})
	}
	return room, err
}

// ingestMark is where a conversation's last evicted turns stored ended:
// below start, from sinks on, on the history whose chain is chain there.
type ingestMark struct {
	sinks, start, bytes int
	chain               uint64
}

// ingestedBytes bounds the marks a Window keeps (ingestMarkBytes each):
// about ten thousand conversations, more than a node serves between two
// turns of one.
const ingestedBytes = 1 << 20

func ingestMarkBytes(m ingestMark) int64 { return int64(m.bytes) + 64 }

// ingestedFrom returns the first evicted turn of a request's cut the store
// may lack: the last one its conversation's previous request stored (sent
// again, so the store can tell it still holds it) when this history goes on
// from that one's, else cut.Sinks.
func (w *Window) ingestedFrom(key memory.Key, cut Cut, prefix []uint64) int {
	m, ok := w.ingested.get(key)
	if !ok || m.sinks != cut.Sinks || m.start <= cut.Sinks || m.start > cut.Start || prefix[m.start] != m.chain {
		return cut.Sinks
	}
	return m.start - 1
}

// turnsRoom is room for a request's lists of turns: its evicted turns
// (source) and the turns in view of its searches (buildPackets).
var turnsRoom = sync.Pool{New: func() any { return new([]memory.Turn) }}

func (s *source) search(q memory.Query) ([]memory.Hit, error) {
	if s.store != nil && s.err == nil {
		hits, err := s.store.Search(s.ctx, s.key, q)
		if err == nil {
			return hits, nil
		}
		s.err = fmt.Errorf("memory store: search %s: %w", s.key, err)
	}
	return s.index().Search(q), nil
}

// index returns the in-memory index of the request's evicted turns, shared
// by the requests of one tenant and conversation key whose history up to
// the cut is the same (and so whose evicted turns are the same).
func (w *Window) index(key memory.Key, msgs []engine.Message, cut Cut, prefix []uint64) *memory.Index {
	h := xxhash.New()
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d", key.Tenant, key.Conversation, cut.Sinks, prefix[cut.Start])
	id := h.Sum64()
	if x, ok := w.indexes.get(id); ok {
		return x
	}
	turns := make([]memory.Turn, 0, cut.Start-cut.Sinks)
	for i := cut.Sinks; i < cut.Start; i++ {
		turns = append(turns, turnAt(msgs, prefix, i))
	}
	x := memory.NewIndex(turns...)
	w.indexes.put(id, key, x)
	return x
}

// turnAt returns message i as a turn on the request's chain.
func turnAt(msgs []engine.Message, prefix []uint64, i int) memory.Turn {
	return memory.Turn{Pos: i, Role: msgs[i].Role, Text: msgs[i].Content, Parent: prefix[i]}
}

// linkNext is the step of a request's chain, prefix[i] the chain of
// msgs[:i] (memory.Link over roles and contents): the packet memo's key
// and the store's branch.
func linkNext(h uint64, m engine.Message) uint64 { return memory.Link(h, m.Role, m.Content) }

// packetKey names a packet by everything it depends on: the conversation,
// the policy, where the cut is, its room, the messages up to its ask, and
// the counter that measured its turns (Packet.Tokens; Request.CountKey).
func packetKey(key memory.Key, cut Cut, upToAsk uint64, countKey string) uint64 {
	h := xxhash.New()
	_, _ = fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%s", key.Tenant, key.Conversation, cut.Policy, cut.Sinks, cut.Start, cut.PacketRoom, cut.PacketFree, upToAsk, countKey)
	return h.Sum64()
}
