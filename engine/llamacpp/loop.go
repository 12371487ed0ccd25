package llamacpp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
	"kvwin/engine/queue"
	"kvwin/kvcache"
)

// slot is one llama.cpp sequence. Loop-owned.
type slot struct {
	id     int
	tokens []int // tokens whose KV the sequence holds, at positions 0..len-1
	prompt int   // how many of tokens were the last request's prompt
	// shared: cells [0, shared) may be shared with other sequences (forks
	// copy cells by reference). Only cells past it may be shifted: moving a
	// shared cell would move it for every sequence holding it.
	shared int
	// shiftedAt: the KV from this position on was shifted (approximate);
	// -1 for none. Only requests allowing Shift reuse past it.
	shiftedAt int
	shifts    int // shifts so far, the epoch of this slot's shifted keys
	task      *task
	lastUsed  uint64
	// owner is whose tokens the slot holds: set when a request takes it.
	// Another tenant's request never reuses them (reusable).
	owner kvcache.Owner
	// forget: the owner's conversation was deleted while this slot
	// generated for it; the slot is cleared when the generation ends.
	forget bool
}

// loop owns the llama.cpp context, the batch and the slots. Only run and
// what it calls touch them.
type loop struct {
	e       *Engine
	batch   *llama.Batch
	pieces  []string
	slots   []*slot
	waiting *queue.Queue[*task] // admitted, waiting for a slot
	clock   uint64
	limit   int // tokens per decode now; shrinks when the KV cache has no room
	// lastTokens: the last step was a token step (see step).
	lastTokens bool
	// worked receives the closes computed off the loop for constrained
	// tasks (constrain.go); workers counts the goroutines computing them.
	worked  chan closeResult
	ready   []closeResult // received, to settle
	workers sync.WaitGroup
}

func newLoop(e *Engine) (*loop, error) {
	b, err := llama.NewBatch(e.cfg.Batch, 1, 0)
	if err != nil {
		return nil, fmt.Errorf("llamacpp: %w", err)
	}
	e.pieces = pieceTable(e.model, e.vocab)
	l := &loop{e: e, batch: b, pieces: e.pieces, limit: e.cfg.Batch,
		worked: make(chan closeResult, 2*e.cfg.Slots), waiting: queue.New[*task](e.cfg.Order)}
	for i := range e.cfg.Slots {
		l.slots = append(l.slots, &slot{id: i, shiftedAt: -1})
	}
	return l, nil
}

func (l *loop) run() {
	e := l.e
	defer close(e.stopped)
	defer e.free()
	defer l.batch.Free()
	defer l.workers.Wait() // each ends at its task's cancellation
	for {
		if !l.busy() && !l.sleep() { // idle: wait for work
			return
		}
		for drained := false; !drained; {
			select {
			case t := <-e.incoming:
				l.wait(t)
			case op := <-e.forgets:
				l.forget(op)
			case <-e.quit:
				l.shutdown()
				return
			default:
				drained = true
			}
		}
		// A client gone is seen before its task's close is settled: the
		// task then ends without another token.
		l.reap()
		for drained := false; !drained; {
			select {
			case r := <-l.worked:
				l.ready = append(l.ready, r)
			default:
				drained = true
			}
		}
		for _, r := range l.ready {
			l.settle(r)
		}
		clear(l.ready)
		l.ready = l.ready[:0]
		l.admit()
		if l.active() > 0 && !l.step() && l.awaiting() > 0 && !l.sleep() {
			// Every active task waits for a close computed off the loop:
			// it slept until one was ready, or a message, or quit.
			return
		}
		l.publish()
	}
}

// sleep waits for the loop's next message: a request, a close computed
// off the loop (settled after the next reap; while idle, only closes of
// tasks that ended, which settle ignores), a forget, or quit, on which it
// shuts down and returns false. Loop-owned.
func (l *loop) sleep() bool {
	e := l.e
	select {
	case t := <-e.incoming:
		l.wait(t)
	case r := <-l.worked:
		l.ready = append(l.ready, r)
	case op := <-e.forgets:
		l.forget(op)
	case <-e.quit:
		l.shutdown()
		return false
	}
	return true
}

// awaiting counts the active tasks waiting for a close.
func (l *loop) awaiting() int {
	n := 0
	for _, s := range l.slots {
		if s.task != nil && s.task.deferred != nil {
			n++
		}
	}
	return n
}

func (l *loop) busy() bool { return l.waiting.Len() > 0 || l.active() > 0 }

func (l *loop) active() int {
	n := 0
	for _, s := range l.slots {
		if s.task != nil {
			n++
		}
	}
	return n
}

// shutdown fails every task, including those still in the channel.
func (l *loop) shutdown() {
	for _, s := range l.slots {
		if t := s.task; t != nil {
			l.finish(t, "", engine.ErrClosed)
			t.cancel() // ends its close worker, if any
		}
	}
	for _, t := range l.waiting.Remove(func(*task) bool { return true }) {
		t.finish("", engine.ErrClosed)
	}
	for {
		select {
		case t := <-l.e.incoming:
			t.finish("", engine.ErrClosed)
		default:
			return
		}
	}
}

// reap ends tasks whose caller has gone: decoding stops at once and the
// slot is free for the next request. What the slot computed stays cached.
func (l *loop) reap() {
	for _, s := range l.slots {
		if t := s.task; t != nil && t.ctx.Err() != nil {
			l.finish(t, "", t.ctx.Err())
		}
	}
	for _, t := range l.waiting.Remove(func(t *task) bool { return t.ctx.Err() != nil }) {
		t.finish("", t.ctx.Err())
	}
}

// wait queues t for a slot, under its class, tenant and cost in tokens
// (its prompt and the most it may generate).
func (l *loop) wait(t *task) {
	l.waiting.Push(t, queue.Key{Class: t.req.Class, Tenant: t.req.Tenant, Weight: t.req.Weight, Cost: len(t.prompt) + t.maxNew})
}

// admit gives waiting tasks to idle slots in the queue's order (class,
// then fair share). A batch task takes a slot only while more than
// InteractiveSlots are idle, unless the starvation bound lets it, which it
// does only while no batch task runs: one being served is not starving.
func (l *loop) admit() {
	reserve := max(l.e.cfg.InteractiveSlots, 0)
	for idle := l.idle(); idle > 0; idle-- {
		var t *task
		var ok bool
		if spare := idle > reserve; spare || !l.servingBatch() {
			t, ok = l.waiting.Pop(spare)
		} else {
			t, ok = l.waiting.PopInteractive()
		}
		if !ok {
			return
		}
		if !l.start(t) { // cannot happen while a slot is idle; never lose it
			l.wait(t)
			return
		}
	}
}

// servingBatch reports whether a slot runs a batch task.
func (l *loop) servingBatch() bool {
	for _, s := range l.slots {
		if s.task != nil && s.task.req.Class == queue.Batch {
			return true
		}
	}
	return false
}

// idle counts the slots without a task.
func (l *loop) idle() int { return len(l.slots) - l.active() }

// start places t in a slot and prepares the slot's KV; false if it must wait.
//
// How much of the prompt each slot holds comes from the registry (a lookup of
// the prompt's block chain), not from scanning slots; the chosen slot's
// actual tokens then give the exact reuse, so a stale or colliding registry
// entry can cost a prefill but never a wrong answer.
func (l *loop) start(t *task) bool {
	views := make([]slotView, len(l.slots))
	idle := false
	for i, s := range l.slots {
		views[i] = slotView{tokens: s.tokens, prompt: s.prompt, busy: s.task != nil, lastUsed: s.lastUsed}
		idle = idle || s.task == nil
	}
	if !idle {
		return false
	}
	t.startedAt = time.Now()
	p, own, noCache := l.plan(t, views)
	s := l.slots[p.target]
	// The slot's content is another conversation's if this prompt does not
	// extend its last prompt: keep it on disk before it is overwritten.
	if own < s.prompt && len(s.tokens) >= l.e.kv.minTokens && l.e.kv.store != nil && s.shiftedAt < 0 {
		if !l.e.kv.store.Has(kvcache.SnapshotID(s.owner, s.tokens)) {
			l.e.kv.save(s.owner, s.tokens, seqState(l.e.lctx, s.id))
		}
	}
	reuse := l.load(s, t, p, noCache)
	t.restore = nil // its state buffer is no longer needed
	s.owner = t.req.Owner
	t.slot, t.cached, t.nPrompt = s.id, reuse, reuse
	s.task, s.prompt = t, len(t.prompt)
	l.record(s, false, t)
	st := &l.e.stats
	st.Requests.Add(1)
	st.PromptTokens.Add(int64(len(t.prompt)))
	st.CachedTokens.Add(int64(reuse))
	return true
}

// plan places t among the slots (views): the target slot, the slot to fork
// its prefix from, if any, and the tokens reused; own is what the target
// itself holds of t's prompt, noCache whether t may reuse only that.
func (l *loop) plan(t *task, views []slotView) (p placement, own int, noCache bool) {
	// The requested slot is a hint: a router names the slot it last saw
	// holding the prefix, but another request may hold it now. Waiting for
	// that request's whole answer would cost more than placing the prompt
	// elsewhere, where placement still finds (or forks, or restores) its
	// prefix.
	pinned := t.req.Slot
	// A binding pin (SlotOnly) reuses nothing but its slot's own KV, and
	// nothing at all where it is placed instead.
	only, noCache := t.req.SlotOnly && pinned >= 0, t.req.NoCache
	if pinned >= 0 && views[pinned].busy {
		pinned = -1
		noCache = noCache || only
	}
	// The caller looked for a snapshot before the request was admitted; a
	// request admitted just before this one may since have taken this
	// conversation's slot and saved it. Look again: the disk read is rare
	// and short (Load waits for a save still being written).
	if t.restore == nil && !noCache && !only {
		t.restore = l.e.kv.prepareRestore(t.req.Tenant, t.chain, t.prompt)
	}
	limit := reuseLimit(len(t.prompt))
	p = place(views, l.held(t, limit), limit, l.e.cfg.BlockTokens, pinned, noCache)
	if only {
		p.source = -1
	}
	own = l.reusable(l.slots[p.target], t)
	if p.source >= 0 {
		p.reuse = l.reusable(l.slots[p.source], t)
		if p.reuse <= own {
			p.source, p.reuse = -1, own // the registry was stale: the target does as well
		}
	} else if !noCache {
		p.reuse = own
	}
	return p, own, noCache
}

// held is how much of t's prompt, up to limit, each slot holds: as the
// registry has it, or, for a slot holding shifted KV, by its tokens.
func (l *loop) held(t *task, limit int) []int {
	held := make([]int, len(l.slots))
	for _, m := range l.e.kv.reg.Lookup(t.chain).Matches {
		if m.Backend == l.e.cfg.Name && m.Tier == kvcache.TierSlot && m.Slot < len(held) {
			held[m.Slot] = min(m.Length, limit)
		}
	}
	// A slot holding shifted KV is registered under keys of its own, never
	// matched against unshifted prompts; the engine matches it by its tokens,
	// as far as this request may reuse it.
	for i, s := range l.slots {
		if s.shiftedAt >= 0 {
			held[i] = l.reusable(s, t)
		}
	}
	return held
}

// load makes slot s hold the first tokens of t's prompt it will reuse, by
// restoring a snapshot, forking p.source or trimming (or shifting) its own
// KV, and returns how many.
func (l *loop) load(s *slot, t *task, p placement, noCache bool) int {
	lctx := l.e.lctx
	restored := false
	if t.restore != nil && t.restore.reuse > p.reuse {
		if restored = l.restore(s, t.restore); !restored && p.source < 0 {
			p.reuse = 0 // the target was cleared for the restore: nothing of it is left
		}
	}
	switch {
	case restored:
		p.reuse = t.restore.reuse
		lctx.KvCacheSeqRm(s.id, p.reuse, -1)
		s.tokens = s.tokens[:p.reuse]
	case p.source >= 0:
		lctx.KvCacheSeqRm(s.id, 0, -1)
		lctx.KvCacheSeqCp(p.source, s.id, 0, p.reuse)
		s.tokens = append(s.tokens[:0], t.prompt[:p.reuse]...)
		src := l.slots[p.source]
		src.shared, s.shared = max(src.shared, p.reuse), p.reuse
		s.shiftedAt = -1
		if src.shiftedAt >= 0 && src.shiftedAt < p.reuse {
			s.shiftedAt = src.shiftedAt
		}
		l.e.stats.Forks.Add(1)
	default:
		if t.req.Shift && !noCache {
			p.reuse = l.shift(s, t.prompt, p.reuse)
		}
		if !lctx.KvCacheSeqRm(s.id, p.reuse, -1) {
			// A partial removal can fail on some architectures: start clean.
			lctx.KvCacheSeqRm(s.id, 0, -1)
			p.reuse = 0
		}
		s.tokens = s.tokens[:p.reuse]
	}
	s.shared = min(s.shared, len(s.tokens))
	if s.shiftedAt >= len(s.tokens) {
		s.shiftedAt = -1
	}
	return p.reuse
}

// failRestores makes every restore fail, for tests of the fallback.
var failRestores bool

// restore loads a snapshot into slot s. When the cache has no contiguous
// room, it defragments and tries once more; false means prefill instead.
func (l *loop) restore(s *slot, r *restore) bool {
	start := time.Now()
	lctx := l.e.lctx
	lctx.KvCacheSeqRm(s.id, 0, -1)
	s.tokens = s.tokens[:0]
	ok := !failRestores && setSeqState(lctx, s.id, r.state)
	if !ok && !failRestores && usedCells(lctx)+len(r.tokens) <= l.e.cfg.Slots*l.e.cfg.Ctx {
		// There is room in total but not in one piece: the cells removed
		// from other slots left holes. Compact now and try again. (Only
		// then: asked to defragment a cache without holes, llama.cpp keeps
		// the request pending and complains at every decode.)
		lctx.KvCacheDefrag()
		applyKVUpdates(lctx)
		ok = setSeqState(lctx, s.id, r.state)
	}
	if !ok {
		lctx.KvCacheSeqRm(s.id, 0, -1)
		l.e.kv.restoreFailures.Add(1)
		l.e.log.Warn("snapshot restore found no room in the KV cache; prefilling instead", "snapshot", r.id, "tokens", len(r.tokens))
		return false
	}
	s.tokens = append(s.tokens, r.tokens...)
	s.shared, s.shiftedAt = 0, -1
	l.e.kv.restores.Add(1)
	l.e.kv.restoresFrom[r.medium].Add(1)
	l.e.kv.timeRestore(r.medium, len(r.tokens), r.loaded+time.Since(start))
	l.e.kv.reg.CountSnapshotRestore(l.e.cfg.Name)
	return true
}

// record tells the registry what slot s holds now, and the journal too
// if publish. A turn taking a slot is published at its end only: the
// journal reaches gateways behind the turn, and the cut-back published
// as the turn starts would reach the gateway that sent the turn after it
// recorded the turn's whole chain, and wipe that until the end's event.
func (l *loop) record(s *slot, publish bool, t *task) {
	loc := kvcache.Location{Backend: l.e.cfg.Name, Slot: s.id}
	var chain kvcache.Chain
	if s.shiftedAt >= 0 {
		chain = l.e.kv.shifted(s.id, s.shifts).ForTenant(s.owner.Tenant).Tokens(s.tokens)
	} else {
		// The slot holds t's prompt, or its first part, or more: the
		// blocks they share keep the keys t's chain gave them.
		var known []kvcache.Key
		if t != nil && t.req.Tenant == s.owner.Tenant {
			known = t.chain.Keys[:min(len(t.chain.Keys), kvcache.SharedPrefix(s.tokens, t.prompt)/l.e.kv.keyer.BlockTokens())]
		}
		chain = l.e.kv.keyer.ForTenant(s.owner.Tenant).TokensAfter(known, s.tokens)
	}
	if err := l.e.kv.reg.Record(loc, chain); err != nil {
		l.e.log.Warn("registry record failed", "slot", s.id, "err", err)
	}
	// The journal publishes the unshifted KV only: a gateway keys it as
	// fresh prefill, which shifted KV is not.
	held := s.tokens
	if s.shiftedAt >= 0 {
		held = held[:s.shiftedAt]
	}
	if publish {
		l.e.journal.SetSlot(s.id, s.owner.Tenant, held)
	}
}

// step runs one llama_decode over the active slots; false when no slot had
// work for it. A step is either a
// token step — the pending token of each generating slot — or a prefill step
// of prompt chunks, the last of which carries the prompt's last token and
// yields the logits of its first generated token. The two kinds never share
// a batch: a token step stays short, and a generating slot's token is always
// computed in a batch of generated tokens only.
func (l *loop) step() bool {
	entries := l.fill()
	if len(entries) == 0 {
		return false
	}
	start := time.Now()
	err := decode(l.e.lctx, l.batch) // compute.go
	took := time.Since(start)
	if err != nil {
		l.decodeFailed(entries, err)
		return true
	}
	l.limit = l.e.cfg.Batch
	l.e.stats.Decodes.Add(1)
	l.advance(entries, took)
	l.sampleAll(entries)
	return true
}

// stepEntry is a task's part of a step's batch: n tokens of its prompt, or
// its one pending token.
type stepEntry struct {
	t      *task
	n      int
	prompt bool
}

// fill clears the batch and fills it for one step, up to l.limit tokens.
// Token steps and prefill steps alternate while both have work, so a
// generating slot never holds a new request's prompt back for its whole
// answer, nor a long prompt the tokens of others. With only one kind of
// work, every step is of that kind.
func (l *loop) fill() []stepEntry {
	l.batch.Clear()
	var entries []stepEntry
	room := l.limit
	add := func(tokenStep bool) {
		if tokenStep {
			entries, room = l.addTokens(entries, room)
		} else {
			entries, room = l.addPrefill(entries, room)
		}
	}
	tokenStep := !l.lastTokens
	add(tokenStep)
	if len(entries) == 0 { // nothing of that kind to do: the other kind
		tokenStep = !tokenStep
		add(tokenStep)
	}
	l.lastTokens = tokenStep
	return entries
}

// addTokens adds each generating task's pending token, within room.
func (l *loop) addTokens(entries []stepEntry, room int) ([]stepEntry, int) {
	for _, s := range l.slots {
		t := s.task
		if t == nil || t.pending < 0 || room == 0 {
			continue
		}
		t.logitsAt = l.batch.NumTokens()
		l.batch.Add(t.pending, nil, len(s.tokens), true, s.id)
		entries = append(entries, stepEntry{t: t, n: 1})
		room--
	}
	return entries, room
}

// addPrefill adds the next chunk of each prompt not yet decoded, within
// room, interactive prompts first (prefillOrder). A step that carries an
// interactive prompt carries no batch prompt: the interactive prompt's last
// chunk would otherwise share its step with up to a batch of batch tokens,
// and its first token would wait for them. The batch prompt goes on in the
// next prefill step with no interactive prompt in it.
func (l *loop) addPrefill(entries []stepEntry, room int) ([]stepEntry, int) {
	interactive := false
	for _, i := range prefillOrder(l.slots) {
		s := l.slots[i]
		t := s.task
		if t == nil || t.pending >= 0 || t.nPrompt >= len(t.prompt) || room == 0 {
			continue
		}
		batch := t.req.Class == queue.Batch
		if batch && interactive {
			break // prefillOrder puts every interactive prompt first
		}
		interactive = interactive || !batch
		n := chunk(len(t.prompt)-t.nPrompt, room)
		for i := range n {
			pos := t.nPrompt + i
			last := pos == len(t.prompt)-1
			if last {
				t.logitsAt = l.batch.NumTokens()
			}
			l.batch.Add(t.prompt[pos], nil, pos, last, s.id) // logits for the last token only
		}
		entries = append(entries, stepEntry{t: t, n: n, prompt: true})
		room -= n
	}
	return entries, room
}

// prefillOrder is the order slots are offered a prefill step's room in:
// those serving an interactive request first, then the others, each in
// slot order. A batch prompt being prefilled then no longer holds an
// interactive prompt that arrived in the reserved slot back for its whole
// length (a step's room went to the lower slot first): the batch prompt
// takes what room is left. Nothing running is stopped.
func prefillOrder(slots []*slot) []int {
	order := make([]int, 0, len(slots))
	for _, interactive := range []bool{true, false} {
		for i, s := range slots {
			if s.task != nil && (s.task.req.Class == queue.Interactive) == interactive {
				order = append(order, i)
			}
		}
	}
	return order
}

// decodeFailed handles a decode that failed: with no room in the KV cache
// the next step retries smaller; any other error ends the batch's tasks.
func (l *loop) decodeFailed(entries []stepEntry, err error) {
	if errors.Is(err, llama.ErrKvCacheFull) && l.limit > 1 {
		// No contiguous room for this batch: defragment (applied at the next
		// decode) and retry with half the tokens.
		l.e.lctx.KvCacheDefrag()
		l.limit = max(1, l.limit/2)
		l.e.log.Warn("kv cache has no room for the batch; defragmenting and retrying smaller", "tokens", l.batch.NumTokens(), "next", l.limit)
		for _, en := range entries {
			en.t.logitsAt = -1
		}
		return
	}
	for _, en := range entries {
		s := l.slots[en.t.slot]
		l.e.lctx.KvCacheSeqRm(s.id, 0, -1)
		s.tokens, s.prompt, s.shared, s.shiftedAt = s.tokens[:0], 0, 0, -1
		l.finish(en.t, "", fmt.Errorf("llamacpp: decode: %w", err))
	}
}

// advance records what a decode that took took added to each slot, and
// shares the time among the tasks by their tokens.
func (l *loop) advance(entries []stepEntry, took time.Duration) {
	total := l.batch.NumTokens()
	for _, en := range entries {
		t, s := en.t, l.slots[en.t.slot]
		share := took * time.Duration(en.n) / time.Duration(total)
		if en.prompt {
			s.tokens = append(s.tokens, t.prompt[t.nPrompt:t.nPrompt+en.n]...)
			t.nPrompt += en.n
			t.promptEval += share
			l.e.stats.PromptDecoded.Add(int64(en.n))
		} else {
			s.tokens = append(s.tokens, t.pending)
			t.pending = -1
			t.decodeTime += share
		}
	}
}

// sampleAll takes the logits a decode produced: an embedding, or the next
// token of each task that has them.
func (l *loop) sampleAll(entries []stepEntry) {
	for _, en := range entries {
		if t := en.t; t.logitsAt >= 0 && t.embed {
			l.takeEmbedding(t) // embed.go
		} else if t.logitsAt >= 0 {
			if firstLogits != nil && t.firstAt.IsZero() {
				firstLogits(logitsRow(l.e.lctx, t.logitsAt, l.e.vocab))
			}
			if editLogits != nil {
				editLogits(liveLogits(l.e.lctx, t.logitsAt, l.e.vocab))
			}
			tok, lp, err := l.sample(t) // sample.go
			t.logitsAt = -1
			if errors.Is(err, errDeferred) {
				continue // settle takes it from here (constrain.go)
			}
			if err != nil {
				l.finish(t, "", err)
				continue
			}
			l.accept(t, tok, lp)
		}
	}
}

// firstLogits, when set (by tests), sees the logits each request's first
// token is sampled from. Only the loop calls it.
var firstLogits func([]float32)

// editLogits, when set (by tests), may rewrite the logits of every token
// before it is sampled, as a faulty computation would. Only the loop calls it.
var editLogits func([]float32)

// accept handles one sampled token: events, stop conditions, the next step.
func (l *loop) accept(t *task, tok int, lp *engine.TokenLogprob) {
	if t.firstAt.IsZero() {
		t.firstAt = time.Now()
		t.emit(engine.Event{First: true, Slot: t.slot, Timings: t.timings()})
	}
	if l.e.model.TokenIsEog(tok) && !t.req.IgnoreEOS {
		l.flush(t)
		l.finish(t, engine.FinishStop, nil)
		return
	}
	t.generated = append(t.generated, tok)
	if lp != nil {
		t.logprobs = append(t.logprobs, *lp)
		t.unsentLP = append(t.unsentLP, *lp)
	}
	l.e.stats.GeneratedTokens.Add(1)
	out, stopped := t.stop.push(t.dec.feed(l.pieces[tok]))
	l.say(t, out)
	if stopped || (t.con != nil && t.con.complete()) {
		reason := engine.FinishStop
		if !stopped {
			l.flush(t)
			if t.con.cut {
				reason = engine.FinishLength // closed to fit max_tokens: cut, not finished
			}
		}
		l.finish(t, reason, nil)
		return
	}
	if len(t.generated) >= t.maxNew {
		l.flush(t)
		l.finish(t, engine.FinishLength, nil)
		return
	}
	t.pending = tok
}

func (l *loop) say(t *task, text string) {
	if text != "" {
		t.text.WriteString(text)
		t.emit(engine.Event{Text: text, Slot: t.slot, Logprobs: t.unsentLP})
		t.unsentLP = nil
	}
}

// flush emits text held back for UTF-8 completion or stop matching.
func (l *loop) flush(t *task) {
	out, stopped := t.stop.push(t.dec.flush())
	if !stopped {
		out += t.stop.flush()
	}
	l.say(t, out)
	if len(t.unsentLP) > 0 {
		t.emit(engine.Event{Slot: t.slot, Logprobs: t.unsentLP})
		t.unsentLP = nil
	}
}

// finish ends t and frees its slot. The slot keeps its KV: a cancelled or
// finished request leaves a valid cached prefix behind.
func (l *loop) finish(t *task, reason string, err error) {
	if t.slot >= 0 {
		s := l.slots[t.slot]
		if s.task == t {
			s.task = nil
			// A request cancelled during prefill leaves less than its prompt.
			s.prompt = min(s.prompt, len(s.tokens))
			l.clock++
			s.lastUsed = l.clock
			// The registry counts the hit or miss against what the slot
			// held when the request arrived, then learns what it holds now.
			loc := kvcache.Location{Backend: l.e.cfg.Name, Slot: s.id}
			l.e.kv.reg.Correct(loc, t.chain, t.cached)
			l.record(s, true, t)
			// Publish now, before the caller wakes: when Generate returns,
			// readers see the slot free.
			l.e.mu.Lock()
			l.e.views[s.id].Processing = false
			l.e.views[s.id].Tokens = len(s.tokens)
			l.e.views[s.id].Tenant = s.owner.Tenant
			l.e.mu.Unlock()
			if s.forget {
				l.clear(s)
			}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		l.e.log.Debug("request cancelled; slot freed", "slot", t.slot, "generated", len(t.generated))
	}
	// The load after the turn is published before the caller wakes too,
	// and the answer says where the journal stands then: a gateway
	// follows the journal by another connection than the answer's, and
	// takes no load from an event before that point as the load now (the
	// turn's own "running", read after its answer, sent the gateway's next
	// turn away from this node: TestJournalSaysWhereATurnEnded).
	l.publishLoad()
	t.journal = l.e.journal.Cursor()
	t.finish(reason, err)
}

// publish copies the slots' state for readers.
func (l *loop) publish() {
	l.e.mu.Lock()
	for i, s := range l.slots {
		l.e.views[i].Processing = s.task != nil
		l.e.views[i].Tokens = len(s.tokens)
		l.e.views[i].Tenant = s.owner.Tenant
	}
	l.e.mu.Unlock()
	l.e.usedCells.Store(int64(usedCells(l.e.lctx)))
	l.publishLoad()
}

// publishLoad states the loop's requests running and waiting in the
// journal. Waiting by the loop's own count (queued, and sent but not
// received), not by the admissions: a turn gives its admission back after
// its last token, when this was published for the last time before the
// node went idle, so an idle node published one request waiting until its
// next request, and every gateway predicted a wait on it: a returning turn
// left the node holding its prefix (3 of 28 runs of
// TestFleetRestoresReturningConversationsFromTheirNodesSnapshots failed
// so; TestJournalLoadIsIdleAfterATurn).
func (l *loop) publishLoad() {
	l.e.journal.SetLoad(kvcache.Load{Running: l.active(), Waiting: l.waiting.Len() + len(l.e.incoming)})
}
