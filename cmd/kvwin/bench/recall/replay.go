package recall

import (
	"context"
	"errors"

	"kvwin/engine"
	"kvwin/window"
)

// cost is what a replay of a conversation's turns cost in prompt tokens.
type cost struct {
	windows, cached float64 // summed window and cached tokens
	turns           int
}

// piece is one rendered message of a window and its tokens.
type piece struct {
	msg    engine.Message
	tokens int
}

// replay sends c's turns in order, each user turn an ask over the history
// before it, and counts the cached tokens of each window: those of the
// longest common prefix, in whole messages as rendered, of the window and
// the previous window followed by the previous answer (the messages between
// the previous ask and this one).
func replay(ctx context.Context, build func([]engine.Message) ([]piece, error), c Conversation) (cost, error) {
	msgs := messages(c, "")
	msgs = msgs[:len(msgs)-1] // no question: the turns themselves are the asks
	var out cost
	var prev []piece
	prevAsk := -1
	for i, m := range msgs {
		if m.Role != engine.RoleUser {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		cur, err := build(msgs[:i+1])
		var tooLong *window.TooLongError
		if errors.As(err, &tooLong) {
			prev, prevAsk = nil, -1
			continue
		}
		if err != nil {
			return out, err
		}
		ref := prev
		if prevAsk >= 0 {
			cnt := counter(c)
			for _, a := range msgs[prevAsk+1 : i] {
				ref = append(ref[:len(ref):len(ref)], piece{a, cnt(a)})
			}
		}
		for k := 0; k < len(cur); k++ {
			out.windows += float64(cur[k].tokens)
		}
		for k := 0; k < len(cur) && k < len(ref) && cur[k] == ref[k]; k++ {
			out.cached += float64(cur[k].tokens)
		}
		out.turns++
		prev, prevAsk = cur, i
	}
	return out, nil
}

// pieces renders a window's messages with their tokens; the sink padding
// counts with the last sink.
func pieces(res window.Result, count window.Counter) []piece {
	out := make([]piece, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = piece{m, count(m)}
	}
	if res.Sinks > 0 && res.Sinks <= len(out) {
		out[res.Sinks-1].tokens += res.SinkPad
	}
	return out
}
