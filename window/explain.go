package window

import (
	"context"
	"slices"

	"kvwin/window/memory"
)

// Explain builds req's window and says, for each position of its
// conversation, why the message there is or is not in it: memory.MissNone
// when the window holds it (verbatim or in a packet), memory.MissInWindow
// never; for an evicted message, the memory's reason (memory.Index.Explain)
// for the latest ask's packet, or memory.MissCut when that ask has no room
// for a packet at all. It is for evaluation: it searches the request's own
// evicted turns, as the window does when the store is down, which gives
// the store's hits on the same history.
func (w *Window) Explain(ctx context.Context, req Request, positions []int) ([]memory.Miss, error) {
	res, err := w.Build(ctx, req)
	if err != nil {
		return nil, err
	}
	in := map[int]bool{}
	for _, p := range res.Packets {
		for _, t := range p.Turns {
			in[t.Pos] = in[t.Pos] || t.Part == "" // a passage is not the whole turn
		}
	}
	out := make([]memory.Miss, len(positions))
	var ask []int // positions the latest ask's search must explain
	for i, pos := range positions {
		switch {
		case pos < res.Sinks || (pos >= res.Start && pos < res.Cut.Messages) || in[pos] || slices.Contains(res.Carried, pos):
			out[i] = memory.MissNone
		case pos < 0 || pos >= res.Cut.Messages:
			out[i] = memory.MissNotHeld
		default:
			out[i] = memory.MissCut // no packet room, unless the search says otherwise
			ask = append(ask, i)
		}
	}
	if len(ask) == 0 || len(res.Cut.Asks) == 0 {
		return out, nil
	}
	count := req.Count
	if count == nil {
		count = ApproxCount
	}
	// The prefix hashes as Build made them; the request's own turns, never
	// the store.
	prefix := w.chains.Keys(req.Owner.Tenant, 0, req.Messages, linkNext)
	own := req
	own.Conversation = ""
	_, _ = w.buildPackets(ctx, own, res.Cut, prefix, count, func(src *source, q memory.Query) {
		want := make([]int, len(ask))
		for j, i := range ask {
			want[j] = positions[i]
		}
		for j, why := range src.index().Explain(q, want) {
			out[ask[j]] = why
		}
	})
	return out, nil
}
