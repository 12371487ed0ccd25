package fleet

import (
	"context"
	"fmt"
	"slices"

	"kvwin/attention"
)

// A replay runs turns recorded from a real fleet (`kvwin bench route`)
// through the simulator configured as that fleet: the same prompts and
// answers, token for token, sent in the order they were sent, at most
// Concurrency at a time (a closed loop, as bench route's clients), a turn
// only once its conversation's previous one ended. It is how the
// simulator is checked against the real thing.

// ReplayTurn is one recorded turn: its conversation and the tokens of its
// prompt and of its answer. A conversation's prompts must each continue
// the one before with its answer (as a chat client re-sends its history).
type ReplayTurn struct {
	Conv           int
	Prompt, Answer []int
}

// Calibrate fits a node's prefill cost from observed prefills (attention.Fit)
// and takes a decode step of stepBase; the rest of the model is the default.
func Calibrate(obs []attention.Observation, step NodeModel) (NodeModel, error) {
	k, err := attention.Fit(obs)
	if err != nil {
		return NodeModel{}, err
	}
	step.Prefill = k
	return step, nil
}

// Replay runs turns on the fleet of cfg (its Policy, Kind, Nodes, Slots,
// Context and Model) and sums them up as a Row (load 0).
func Replay(ctx context.Context, cfg Config, turns []ReplayTurn, concurrency int) (Row, error) {
	out, err := replay(ctx, cfg, turns, concurrency)
	if err != nil {
		return Row{}, err
	}
	return summarize(out.turns, cfg, 0), nil
}

// replay is Replay's run, turn by turn (in the order sent).
func replay(ctx context.Context, cfg Config, turns []ReplayTurn, concurrency int) (outcome, error) {
	convs, index, err := replayConversations(turns)
	if err != nil {
		return outcome{}, err
	}
	s, err := newSim(cfg)
	if err != nil {
		return outcome{}, err
	}
	defer s.router.Close()
	next, inflight := 0, 0
	done := make([]int, len(convs)) // turns of each conversation ended
	var issue func()
	issue = func() {
		for next < len(turns) && inflight < max(concurrency, 1) {
			ci, t := turns[next].Conv, index[next]
			if done[ci] < t {
				return // its previous turn is still running
			}
			next++
			inflight++
			s.turn(ctx, ci, convs[ci], t)
		}
	}
	s.onEnd = func(rec *turnRecord) {
		inflight--
		done[rec.ci]++
		s.after(0, issue)
	}
	s.after(0, issue)
	out := s.loop()
	if next < len(turns) {
		return outcome{}, fmt.Errorf("replay: %d of %d turns sent", next, len(turns))
	}
	return out, nil
}

// replayConversations builds each conversation's stream from its turns
// and says which turn of its conversation each turn is.
func replayConversations(turns []ReplayTurn) ([]*conversation, []int, error) {
	n := 0
	for _, t := range turns {
		if t.Conv < 0 {
			return nil, nil, fmt.Errorf("replay: conversation %d", t.Conv)
		}
		n = max(n, t.Conv+1)
	}
	convs := make([]*conversation, n)
	index := make([]int, len(turns))
	for i, t := range turns {
		c := convs[t.Conv]
		if c == nil {
			c = &conversation{}
			convs[t.Conv] = c
		}
		if len(t.Prompt) == 0 || len(t.Answer) == 0 {
			return nil, nil, fmt.Errorf("replay: conversation %d turn %d: empty prompt or answer", t.Conv, c.turns())
		}
		if len(t.Prompt) < len(c.stream) || !slices.Equal(t.Prompt[:len(c.stream)], c.stream) {
			return nil, nil, fmt.Errorf("replay: conversation %d turn %d does not continue its history", t.Conv, c.turns())
		}
		index[i] = c.turns()
		c.stream = append(append(c.stream, t.Prompt[len(c.stream):]...), t.Answer...)
		c.promptEnd = append(c.promptEnd, len(t.Prompt))
		c.answerEnd = append(c.answerEnd, len(c.stream))
		c.think = append(c.think, 0)
	}
	for i, c := range convs {
		if c == nil {
			convs[i] = &conversation{}
		}
	}
	return convs, index, nil
}
