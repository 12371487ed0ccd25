package recall

import (
	"context"
	"errors"
	"fmt"

	"kvwin/engine"
	"kvwin/internal/ident"
	"kvwin/window"
	"kvwin/window/memory"
)

// Options choose what to evaluate.
type Options struct {
	Policies []string // policy names (Policies()); default DefaultPolicies
	Budgets  []int    // window budgets in tokens; required
	// Settings are the window settings besides Budget (zero: defaults).
	Settings window.Settings
	// Progress, if set, is called after each question with the run's
	// position; it runs on the calling goroutine.
	Progress func(Progress)
	// NoReplay skips the turn-by-turn replay (CachedShare and
	// UncachedPerTurn stay 0).
	NoReplay bool
}

// Progress reports how far a run is.
type Progress struct {
	Policy          string
	Budget          int
	Done, Questions int
}

// Row is the result for one policy at one budget, over every question of
// every conversation.
type Row struct {
	Policy string `json:"policy"`
	Budget int    `json:"budget"`
	// Recall is the share of a question's evidence turns in its window,
	// averaged over questions; Stale the same for stale evidence, over the
	// questions that have any. Both are fractions in [0, 1].
	Recall float64 `json:"recall"`
	Stale  float64 `json:"stale"`
	// PromptTokens is the mean window size in tokens, packets and sink
	// padding included.
	PromptTokens float64 `json:"prompt_tokens"`
	// CachedShare and UncachedPerTurn are the cost of the policy when each
	// conversation's turns are replayed in order, each user turn an ask
	// over the history before it: a turn's cached tokens are those of the
	// longest common prefix, in whole messages as rendered, of its window
	// and the previous window followed by the previous answer.
	// CachedShare = Σ cached ÷ Σ window tokens (a fraction in [0, 1]);
	// UncachedPerTurn = mean window tokens minus cached.
	CachedShare     float64 `json:"cached_share"`
	UncachedPerTurn float64 `json:"uncached_per_turn"`

	// PassageRecall is Recall counting also the evidence turns the window
	// carries only in part: as an excerpt (a long message) or as a passage
	// in a packet. A passage-level figure beside Recall, which counts whole
	// turns only.
	PassageRecall float64 `json:"passage_recall"`

	Questions      int `json:"questions"`
	StaleQuestions int `json:"-"`
	// Failed counts questions the policy could not window (a request
	// past what the policy can send): they count as recall 0 and are left
	// out of PromptTokens.
	Failed int `json:"failed"`
	// LostBy is Lost keyed by the reason's name (memory.Miss.String), for
	// --json.
	LostBy map[string]float64 `json:"lost,omitempty"`
	// Lost is, for the memory policy, the recall lost by why each missed
	// evidence turn is not in the window (memory.Miss): per question the
	// share of its evidence missed for that reason, averaged over
	// questions like Recall, so the shares sum to 1 − Recall.
	Lost map[memory.Miss]float64 `json:"-"`
}

// DefaultPolicies are evaluated when Options.Policies is empty.
var DefaultPolicies = []string{window.PolicySliding, window.PolicySink, PolicyBM25, window.PolicyMemory}

// Policies returns every policy the bench knows: the window's and the
// reference PolicyBM25.
func Policies() []string { return append(window.Policies(), PolicyBM25) }

// Evaluate runs every policy at every budget over convs and returns one row
// per (policy, budget), in the order given. It stops early if ctx ends.
func Evaluate(ctx context.Context, convs []Conversation, opt Options) ([]Row, error) {
	if len(opt.Budgets) == 0 {
		return nil, errors.New("recall: no budgets")
	}
	policies := opt.Policies
	if len(policies) == 0 {
		policies = DefaultPolicies
	}
	total := 0
	for _, c := range convs {
		total += len(c.Questions)
	}
	var rows []Row
	for _, policy := range policies {
		for _, budget := range opt.Budgets {
			s := opt.Settings
			s.Budget = budget
			if s.Switch > budget {
				s.Switch = budget
			}
			build, err := builder(policy, s)
			if err != nil {
				return nil, fmt.Errorf("policy %s at budget %d: %w", policy, budget, err)
			}
			row := Row{Policy: policy, Budget: budget}
			var recall, partial, stale, tokens float64
			var spent cost
			done := 0
			for _, c := range convs {
				for _, q := range c.Questions {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					in, part, prompt, err := build.question(ctx, c, q)
					var tooLong *window.TooLongError
					switch {
					case errors.As(err, &tooLong):
						row.Failed++
						in = nil
					case err != nil:
						return nil, fmt.Errorf("policy %s at budget %d, question %q: %w", policy, budget, q.Question, err)
					default:
						tokens += float64(prompt)
					}
					recall += share(q.Evidence, in)
					partial += share(q.Evidence, union(in, part))
					if err == nil {
						if err := build.explain(ctx, c, q, in, &row); err != nil {
							return nil, fmt.Errorf("policy %s at budget %d, question %q: %w", policy, budget, q.Question, err)
						}
					}
					row.Questions++
					if len(q.Stale) > 0 {
						stale += share(q.Stale, in)
						row.StaleQuestions++
					}
					done++
					if opt.Progress != nil {
						opt.Progress(Progress{Policy: policy, Budget: budget, Done: done, Questions: total})
					}
				}
				if !opt.NoReplay {
					cs, err := replay(ctx, func(msgs []engine.Message) ([]piece, error) { return build.window(ctx, c, msgs) }, c)
					if err != nil {
						return nil, fmt.Errorf("policy %s at budget %d, replay of %s: %w", policy, budget, c.ID, err)
					}
					spent.windows += cs.windows
					spent.cached += cs.cached
					spent.turns += cs.turns
				}
			}
			if row.Questions > 0 {
				row.Recall = recall / float64(row.Questions)
				row.PassageRecall = partial / float64(row.Questions)
				for k := range row.Lost {
					row.Lost[k] /= float64(row.Questions)
					if row.LostBy == nil {
						row.LostBy = map[string]float64{}
					}
					row.LostBy[k.String()] = row.Lost[k]
				}
			}
			if row.StaleQuestions > 0 {
				row.Stale = stale / float64(row.StaleQuestions)
			}
			if n := row.Questions - row.Failed; n > 0 {
				row.PromptTokens = tokens / float64(n)
			}
			if spent.windows > 0 {
				row.CachedShare = spent.cached / spent.windows
				row.UncachedPerTurn = (spent.windows - spent.cached) / float64(spent.turns)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// policyRun builds the windows of one policy at one budget.
type policyRun struct {
	w     *window.Window // nil for PolicyBM25
	store *benchStore
	s     window.Settings
}

func builder(policy string, s window.Settings) (*policyRun, error) {
	if policy == PolicyBM25 {
		if s.Budget < 2 {
			return nil, fmt.Errorf("%w: budget %d", window.ErrSettings, s.Budget)
		}
		return &policyRun{s: s}, nil
	}
	st := newBenchStore()
	w, err := window.New(window.Config{Policy: policy, Settings: s}, st)
	if err != nil {
		return nil, err
	}
	return &policyRun{w: w, store: st, s: s}, nil
}

// question builds the window for q asked after c's last turn and returns
// which turns it holds whole (verbatim or in a packet), which only in part
// (an excerpt, a passage), and its size.
func (r *policyRun) question(ctx context.Context, c Conversation, q Question) (in, part map[int]bool, tokens int, err error) {
	msgs := messages(c, q.Question)
	in, part = map[int]bool{}, map[int]bool{}
	if r.w == nil {
		b := bm25Window(msgs, counter(c), speakerOf(c), r.s.Budget)
		for i := b.Start; i < len(c.Turns); i++ {
			in[i] = true
		}
		for _, p := range b.Packet {
			in[p] = true
		}
		return in, part, b.Tokens, nil
	}
	res, err := r.w.Build(ctx, window.Request{Owner: ident.Owner{Tenant: "bench", Conversation: c.ID}, Messages: msgs, Count: counter(c)})
	if err != nil {
		return nil, nil, 0, err
	}
	for i := 0; i < res.Sinks; i++ {
		in[i] = true
	}
	for i := res.Start; i < len(c.Turns); i++ {
		in[i] = true
	}
	for _, e := range res.Excerpts {
		delete(in, e.Pos) // recall counts whole turns: an excerpt is not one
		part[e.Pos] = true
	}
	for _, p := range res.Packets {
		for _, t := range p.Turns {
			if t.Part == "" { // nor is a passage
				in[t.Pos] = true
			} else {
				part[t.Pos] = true
			}
		}
	}
	return in, part, res.PromptTokens(), nil
}

// union returns the positions in a or b.
func union(a, b map[int]bool) map[int]bool {
	out := make(map[int]bool, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = out[k] || v
	}
	return out
}

// explain adds to row.Lost why q's evidence turns missing from in are not
// in the memory policy's window (other policies explain nothing).
func (r *policyRun) explain(ctx context.Context, c Conversation, q Question, in map[int]bool, row *Row) error {
	if r.w == nil {
		return nil
	}
	var missed []int
	for _, e := range q.Evidence {
		if !in[e] {
			missed = append(missed, e)
		}
	}
	if len(missed) == 0 || row.Policy != window.PolicyMemory {
		return nil
	}
	why, err := r.w.Explain(ctx, window.Request{Owner: ident.Owner{Tenant: "bench", Conversation: c.ID}, Messages: messages(c, q.Question), Count: counter(c)}, missed)
	if err != nil {
		return err
	}
	if row.Lost == nil {
		row.Lost = map[memory.Miss]float64{}
	}
	for _, m := range why {
		row.Lost[m] += 1 / float64(len(q.Evidence))
	}
	return nil
}

// window renders the window of msgs (the last is the ask) as sent.
func (r *policyRun) window(ctx context.Context, c Conversation, msgs []engine.Message) ([]piece, error) {
	count := counter(c)
	if r.w == nil {
		b := bm25Window(msgs, count, speakerOf(c), r.s.Budget)
		var out []piece
		for _, m := range b.rendered(msgs) {
			out = append(out, piece{m, count(m)})
		}
		return out, nil
	}
	res, err := r.w.Build(ctx, window.Request{Owner: ident.Owner{Tenant: "bench", Conversation: c.ID}, Messages: msgs, Count: count})
	if err != nil {
		return nil, err
	}
	return pieces(res, count), nil
}

// messages maps the conversation to chat messages: speaker A's turns are the
// user's, everyone else's the assistant's; the question is a user message.
func messages(c Conversation, question string) []engine.Message {
	out := make([]engine.Message, 0, len(c.Turns)+1)
	for _, t := range c.Turns {
		role := engine.RoleAssistant
		if t.Speaker == c.SpeakerA {
			role = engine.RoleUser
		}
		out = append(out, engine.Message{Role: role, Content: t.Text})
	}
	return append(out, engine.Message{Role: engine.RoleUser, Content: question})
}

// speakerOf names the speaker of a message by its role.
func speakerOf(c Conversation) func(engine.Message) string {
	return func(m engine.Message) string {
		if m.Role == engine.RoleUser {
			return c.SpeakerA
		}
		return c.SpeakerB
	}
}

// counter counts ceil(bytes of "speaker: text" / 4), the README's rule.
func counter(c Conversation) window.Counter {
	return func(m engine.Message) int {
		speaker := c.SpeakerB
		if m.Role == engine.RoleUser {
			speaker = c.SpeakerA
		}
		return engine.EstimateTokens(len(speaker) + 2 + len(m.Content))
	}
}

func share(ids []int, in map[int]bool) float64 {
	if len(ids) == 0 {
		return 0
	}
	n := 0
	for _, i := range ids {
		if in[i] {
			n++
		}
	}
	return float64(n) / float64(len(ids))
}
