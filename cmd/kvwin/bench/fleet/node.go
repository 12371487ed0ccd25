package fleet

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"kvwin/attention"
	"kvwin/engine"
	"kvwin/gguf"
	"kvwin/kvcache"
)

// Node kinds.
const (
	KindLlamaServer = "llamaserver" // a slot reuses only its own KV (no prefix copy between slots)
	KindKvwin       = "kvwin"       // a kvwin node: a prefix one slot holds is copied into another; snapshots with Config.Tiers (tiers.go)
)

// NodeModel is what a simulated node's work costs: prefill from the
// calibrated cost model of package attention (t = C0 + A·P + B·P·(C +
// P/2)), decode one step of every decoding slot at once, each step reading
// the weights once and every decoding slot's KV (memory-bound).
type NodeModel struct {
	Prefill attention.Coefficients
	// StepBase is a decode step's time with an empty cache (the weights
	// read once); StepPerCell adds each KV cell the step attends to.
	StepBase, StepPerCell time.Duration
	// KVBytesPerToken is a token's KV; HostBandwidth the bytes per second
	// it moves at between the GPU and host memory (a llama-server's
	// prompt cache, promptcache.go).
	KVBytesPerToken int
	HostBandwidth   float64
	// RestoreBytes is how fast a kvwin node restores a snapshot from each
	// tier (indexed by kvcache.MediumRAM, MediumDisk): bytes of KV state a
	// second, read, zstd-decoded and copied into the context. A snapshot
	// holds KVBytesPerToken a token (zstd at its fastest shrinks fp16 KV
	// little; kvcache/store.go), and is read whole.
	RestoreBytes [2]float64
}

// Default node: an 8B model (Llama-3.1-8B's shape) at Q4_K_M on a GPU
// sustaining 14 TFLOP/s of prefill through llama.cpp and 400 GB/s of
// memory bandwidth: about 870 tokens/s cold prefill and 12 ms a decode
// step, within what llama.cpp reaches on one A10- or M2-Ultra-class GPU.
// The one rule that set it: at --load 0.2 the conversations in progress
// fit the fleet's slots with room for Poisson's spread (the issue's "at
// 0.2 they fit"): 0.73 of the slots on average, as the report's
// active_per_slot shows. Its host link is PCIe 4.0 ×16 at the 25 GB/s
// such a link moves in practice.
const (
	defaultFLOPs         = 14e12
	defaultBandwidth     = 400e9
	defaultHostBandwidth = 25e9
)

// Restore speeds, calibrated on a real kvwin node: the test model's nodes
// publish 1.9–2.0 M tokens/s restoring from RAM and 1.3–1.4 M from disk
// (docs/fleet.md, "Snapshots from the nodes"; a moving average of read,
// decode and copy into the context), at 512 bytes of KV state a token (2
// layers × 1 KV head × 64 × K and V × fp16): 1.0 GB/s from RAM, 0.69 GB/s
// from disk. The work is the zstd decode and the copy, byte for byte, so
// a node of another model restores at the same bytes a second: the 8B
// model's 128 KiB a token at 7,600 tokens/s from RAM and 5,300 from disk,
// 8.8 and 6.0 times its cold prefill.
const (
	defaultRestoreRAM  = 1.0e9
	defaultRestoreDisk = 0.69e9
)

// llama8B is Llama-3.1-8B's shape, as gguf.Read reports it.
var llama8B = gguf.Shape{Name: "llama-3.1-8b", Architecture: "llama", Layers: 32, Embedding: 4096, FeedForward: 14336,
	Heads: 32, KVHeads: 8, HeadDim: 128, ContextLength: 131072, VocabSize: 128256, FileType: "Q4_K_M", Params: 8030261248}

// DefaultNodeModel is the default node (see the constants above).
func DefaultNodeModel() NodeModel {
	cost, err := attention.NewCost(llama8B, "f16")
	if err != nil {
		panic(err) // the shape above is complete
	}
	return NodeModel{Prefill: cost.Prior(defaultFLOPs),
		StepBase:        time.Duration(float64(cost.WeightBytes) / defaultBandwidth * float64(time.Second)),
		StepPerCell:     time.Duration(float64(cost.KVBytesPerToken) / defaultBandwidth * float64(time.Second)),
		KVBytesPerToken: cost.KVBytesPerToken, HostBandwidth: defaultHostBandwidth,
		RestoreBytes: [2]float64{kvcache.MediumRAM: defaultRestoreRAM, kvcache.MediumDisk: defaultRestoreDisk}}
}

// prefill is the time of p new tokens after cached ones.
func (m NodeModel) prefill(p, cached int) time.Duration { return m.Prefill.Predict(p, cached) }

// moved is the time of moving the KV of tokens between the GPU and host
// memory.
func (m NodeModel) moved(tokens int) time.Duration {
	if tokens <= 0 || m.HostBandwidth <= 0 {
		return 0
	}
	return time.Duration(float64(tokens*m.KVBytesPerToken) / m.HostBandwidth * float64(time.Second))
}

// slotState is what one slot of a simulated node holds.
type slotState struct {
	kv       []int // tokens whose KV the slot holds (read only: a view of a conversation's stream)
	busy     bool
	lastUsed uint64
	prompt   int // tokens of the last prompt run on it
	conv     int // whose they are (the conversation's index)
}

// job is one request on a node, from its arrival to its end. The request's
// goroutine (the router's) parks on wake between the node's steps.
type job struct {
	req     engine.Request
	answer  []int
	turn    *turnRecord
	slot    int
	reuse   int
	lru     bool          // the node chose the slot as the least recently used
	moved   int           // tokens of KV the prompt cache moved for it
	restore time.Duration // reading a snapshot back (tiers.go)
	prefill time.Duration
	wake    chan struct{}
	res     engine.Result
}

// node is a simulated llama-server or kvwin node, an engine.Backend the
// router drives as it drives a remote one. Its state is touched only by
// the simulation's one thread of control (see sim).
type node struct {
	sim   *sim
	info  engine.Info
	kind  string
	model NodeModel
	slots []slotState
	clock uint64
	cache *promptCache // a llama-server's --cache-ram; nil without
	// store is a kvwin node's snapshot tiers (tiers.go), journal what the
	// node publishes of its slots and snapshots; nil without tiers.
	store   *snapshotStore
	journal *kvcache.Journal
	follow  *follow // the router's follower of the journal (follow.go)

	waiting    []*job // arrived, no slot yet
	prefillQ   []*job // on a slot, waiting for the node's prefill
	prefilling bool
	decodeKV   int // KV cells the decoding slots attend to
}

var (
	_ engine.Backend    = (*node)(nil)
	_ engine.Prompter   = (*node)(nil)
	_ engine.SlotPinner = (*node)(nil)
)

func newNode(s *sim, i int, cfg Config) *node {
	n := &node{sim: s, kind: cfg.Kind, model: cfg.Model, slots: make([]slotState, cfg.Slots)}
	if cfg.Kind == KindLlamaServer {
		n.cache = newPromptCache(cfg.CacheRAM, cfg.Model.KVBytesPerToken)
	}
	name := fmt.Sprintf("node%03d", i)
	if i < len(cfg.Names) {
		name = cfg.Names[i]
	}
	model := cfg.ModelName
	if model == "" {
		model = "sim"
	}
	n.info = engine.Info{Name: name, Model: model, ContextSlot: cfg.Context, Slots: cfg.Slots,
		SharesPrefixes: cfg.Kind == KindKvwin, Snapshots: cfg.Tiers.On()}
	if cfg.Tiers.On() {
		n.journal, _ = kvcache.NewJournal(kvcache.JournalConfig{}) // the defaults are valid
		n.store = newSnapshotStore(cfg.Tiers, cfg.Model.KVBytesPerToken, n.journal)
		n.follow = newFollow()
	}
	return n
}

// Info describes the node; it is immutable, so the router's health checks
// may read it from their own goroutines.
func (n *node) Info() engine.Info { return n.info }

// Prompt returns the request's tokens: the workload sends token ids.
func (n *node) Prompt(_ context.Context, req engine.Request) ([]int, error) { return req.Tokens, nil }

// PinsSlots: a request runs on the slot it names.
func (n *node) PinsSlots() bool { return true }

// Generate runs req in simulated time: it hands the request to the node
// and parks until the simulation reaches its first token, then its end.
func (n *node) Generate(_ context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	if len(req.Tokens) == 0 || len(req.Tokens) >= n.info.ContextSlot || req.Slot >= len(n.slots) {
		return engine.Result{}, engine.Invalid("simulated node: prompt of %d tokens, slot %d", len(req.Tokens), req.Slot)
	}
	t := n.sim.pending[req.Conversation]
	j := &job{req: req, turn: t, answer: t.answer, slot: -1, wake: make(chan struct{})}
	n.waiting = append(n.waiting, j)
	n.dispatch()
	n.sim.park(j.wake) // until the first token
	if stream != nil {
		if err := stream(engine.Event{First: true, Slot: j.slot, Timings: j.res.Timings}); err != nil {
			return engine.Result{}, err
		}
	}
	n.sim.park(j.wake) // until the end
	return j.res, nil
}

// dispatch gives waiting requests slots, in arrival order, and starts the
// prefill if the node is idle.
func (n *node) dispatch() {
	kept := n.waiting[:0]
	for _, j := range n.waiting {
		s := n.choose(j)
		if s < 0 {
			kept = append(kept, j)
			continue
		}
		n.take(j, s)
	}
	clear(n.waiting[len(kept):])
	n.waiting = kept
	n.startPrefill()
}

// choose is the slot j runs on, -1 if it must wait. llama-server: the
// slot named (waiting for it); else the idle slot sharing the longest
// prefix with the prompt, above a tenth of it (--slot-prompt-similarity
// 0.1); else the least recently used idle slot. A kvwin node
// (engine/llamacpp/placement.go): the slot named if idle, else as
// unpinned: the idle slot whose prompt the new one continues, with the
// longest common prefix (an empty slot qualifies); else the least
// recently used idle slot.
func (n *node) choose(j *job) int {
	p := j.req.Tokens
	if s := j.req.Slot; s >= 0 {
		if !n.slots[s].busy {
			return s
		}
		if n.kind == KindLlamaServer {
			return -1
		}
	}
	best, bestLCP := -1, -1
	for i, s := range n.slots {
		if s.busy {
			continue
		}
		l := lcp(s.kv, p)
		switch n.kind {
		case KindLlamaServer:
			if len(s.kv) > 0 && l > bestLCP && float64(l) > 0.1*float64(len(p)) {
				best, bestLCP = i, l
			}
		default:
			if l >= min(len(s.kv), len(p)-1)/16*16 && l > bestLCP {
				best, bestLCP = i, l
			}
		}
	}
	if best >= 0 {
		return best
	}
	for i, s := range n.slots {
		if !s.busy && (best < 0 || s.lastUsed < n.slots[best].lastUsed) {
			best = i
		}
	}
	j.lru = best >= 0
	return best
}

// take puts j on slot s: what it reuses there (a kvwin node also copies a
// longer prefix another slot holds; a llama-server with a prompt cache may
// swap the slot's prompt for a cached one), and its prefill queued.
func (n *node) take(j *job, s int) {
	p := j.req.Tokens
	reuse := 0
	if kv := n.slots[s].kv; n.cache != nil && !j.req.NoCache && len(kv) > 0 && (j.lru || 2*lcp(kv, p) < len(kv)) {
		if n.cache.save(kv) {
			j.moved += len(kv)
		}
		if e := n.cache.load(kv, p); e != nil {
			n.slots[s].kv = e
			j.moved += len(e)
		}
	}
	if !j.req.NoCache {
		reuse = lcp(n.slots[s].kv, p)
		if n.kind == KindKvwin && !j.req.SlotOnly {
			for _, o := range n.slots {
				reuse = max(reuse, lcp(o.kv, p))
			}
		}
	}
	j.slot, j.reuse = s, min(reuse, len(p)-1)
	if n.store != nil {
		n.tiered(j, s)
	}
	n.slots[s] = slotState{kv: p, busy: true, lastUsed: n.slots[s].lastUsed, prompt: len(p), conv: j.turn.ci}
	j.turn.started = n.sim.now
	j.turn.slot, j.turn.pin = s, j.req.Slot
	n.prefillQ = append(n.prefillQ, j)
}

// tiered is take's part on a node with snapshot tiers, in the order of
// the node's start (engine/llamacpp/loop.go): the best snapshot is looked
// up, the slot's content is saved if j's prompt does not continue the
// slot's last prompt (another conversation's), and the snapshot is
// restored if it gives j more than the slots do.
func (n *node) tiered(j *job, s int) {
	p := j.req.Tokens
	if j.req.NoCache || j.req.SlotOnly && j.req.Slot >= 0 {
		return
	}
	live := 0
	for _, o := range n.slots {
		live = max(live, lcp(o.kv, p))
	}
	f := n.store.best(p, live/oracleBlock)
	if held := n.slots[s]; lcp(held.kv, p) < held.prompt {
		n.store.save(held.conv, j.req.Tenant, held.kv)
	}
	if f == nil {
		return
	}
	if r := min(lcp(f.tokens, p), len(p)-1); r > j.reuse {
		j.reuse = r
		j.restore = time.Duration(n.store.restored(f, n.model) * float64(time.Second))
		j.turn.restored, j.turn.restoredFrom = len(f.tokens), f.medium
	}
}

// startPrefill runs the next queued prefill when none runs: one at a time.
func (n *node) startPrefill() {
	if n.prefilling || len(n.prefillQ) == 0 {
		return
	}
	j := n.prefillQ[0]
	n.prefillQ = n.prefillQ[1:]
	n.prefilling = true
	p := j.req.Tokens
	// The prompt cache's copies run in the server's loop before the
	// prompt; its timings.prompt_ms counts the prompt alone.
	j.prefill = n.model.prefill(len(p)-j.reuse, j.reuse)
	j.turn.prefillAt = n.sim.now
	n.sim.after(n.model.moved(j.moved)+j.restore+j.prefill, func() { n.firstToken(j) })
}

// firstToken ends j's prefill: the router's goroutine gets its first
// event, decoding starts, the next prefill runs.
func (n *node) firstToken(j *job) {
	n.prefilling = false
	p := j.req.Tokens
	j.turn.first = n.sim.now
	j.res.Timings = engine.Timings{PromptTokens: len(p), CachedTokens: j.reuse, PromptEval: j.prefill,
		FirstToken: n.sim.now - j.turn.arrived}
	j.res.Slot = j.slot
	steps := max(len(j.answer)-1, 0)
	n.decodeKV += len(p)
	step := n.model.StepBase + time.Duration(n.decodeKV)*n.model.StepPerCell
	decode := time.Duration(steps) * step
	n.sim.resume(j.wake)
	n.sim.after(decode, func() { n.finish(j, decode) })
	n.startPrefill()
}

// finish ends j: its slot holds the prompt and the answer (but its last
// token, sampled and never computed into KV), the router's goroutine gets
// the result, and waiting requests may take the slot.
func (n *node) finish(j *job, decode time.Duration) {
	n.decodeKV -= len(j.req.Tokens)
	n.clock++
	p := j.req.Tokens
	kv := j.turn.conv.stream[:heldEnd(j.turn.conv, j.turn.index)]
	n.slots[j.slot] = slotState{kv: kv, lastUsed: n.clock, prompt: len(p), conv: j.turn.ci}
	if n.journal != nil {
		n.journal.SetSlot(j.slot, j.req.Tenant, kv) // published at the turn's end, as a node does
	}
	j.res.Tokens = j.answer
	j.res.FinishReason = engine.FinishStop
	j.res.Timings.GeneratedTokens = len(j.answer)
	j.res.Timings.Decode = decode
	j.turn.end = n.sim.now
	j.turn.cached, j.turn.computed = j.reuse, len(p)-j.reuse
	n.sim.resume(j.wake) // the router learns and its Generate returns
	n.sim.ended(j.turn)
	n.dispatch()
}

// lcp is the length of the common prefix of a and b; views of one
// conversation's stream share it whole.
func lcp(a, b []int) int {
	n := min(len(a), len(b))
	if n == 0 {
		return 0
	}
	if unsafe.SliceData(a) == unsafe.SliceData(b) {
		return n
	}
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
