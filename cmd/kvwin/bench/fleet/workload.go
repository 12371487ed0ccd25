package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Workload is the synthetic workload of bench fleet: multi-turn
// conversations arriving as a Poisson process, each opening with one of
// Groups shared system prompts of SystemTokens tokens, with exponential
// think times between its turns.
//
// Turn and answer lengths follow distributions derived from LoCoMo (the
// five conversations of ../shared/data/locomo-dev.json, counted by that
// README's convention, ceil(bytes of "speaker: text" / 4)): an utterance
// is log-normal with μ 3.39, σ 0.52 (median 30 tokens, mean 34); a
// session, which is one conversation here, has log-normal(3.03, 0.27)
// utterances (median 21), half of them the user's and half the answers.
// Each user message carries 8 tokens of chat template (ChatML's
// <|im_start|>user … <|im_end|> and the assistant's header), each answer
// one (its end token). A conversation ends early rather than outgrow a
// slot's context.
type Workload struct {
	Conversations int
	Groups        int
	SystemTokens  int
	Think         time.Duration // mean think time between turns
	Context       int           // KV tokens per slot: no conversation outgrows it
	Seed          uint64
	// Regenerate is the share of turns sent again once answered (a
	// client's retry, a "regenerate" button, an agent re-asking), after
	// an exponential wait of mean Think/6; the conversation then goes on
	// from the second answer. 0: none, and the workload is drawn as
	// without the field.
	Regenerate float64
}

// DefaultWorkload is the issue's: 8 groups of 1,000-token system prompts,
// think times of 30 s, 4,096 tokens of KV per slot.
func DefaultWorkload() Workload {
	return Workload{Conversations: 5000, Groups: 8, SystemTokens: 1000, Think: 30 * time.Second, Context: 4096, Seed: 1}
}

// LoCoMo-derived length distributions (see Workload).
const (
	utteranceMu, utteranceSigma = 3.39, 0.52
	sessionMu, sessionSigma     = 3.03, 0.27
	userTemplateTokens          = 8
	answerTemplateTokens        = 1
	maxUtterance                = 400
	vocabulary                  = 32000
)

// conversation is one conversation's whole token stream (system prompt,
// then each turn's user message and answer) and where each turn's prompt
// and answer end in it: turn t's prompt is stream[:promptEnd[t]], its
// answer stream[promptEnd[t]:answerEnd[t]]. Every prompt is a prefix of
// the stream, as a chat client re-sends its history.
type conversation struct {
	stream               []int
	promptEnd, answerEnd []int
	start                time.Duration // arrival of its first turn
	think                []time.Duration
	// at, for a trace: each turn's own arrival (no think times).
	at []time.Duration
}

func (c *conversation) turns() int { return len(c.promptEnd) }

func (c *conversation) prompt(t int) []int { return c.stream[:c.promptEnd[t]:c.promptEnd[t]] }

func (c *conversation) answer(t int) []int { return c.stream[c.promptEnd[t]:c.answerEnd[t]] }

// generate draws the conversations, without arrival times.
func (w Workload) generate() ([]*conversation, error) {
	if w.Conversations <= 0 || w.Groups <= 0 || w.SystemTokens <= 0 || w.Context <= w.SystemTokens+64 || w.Regenerate < 0 || w.Regenerate > 1 {
		return nil, fmt.Errorf("fleet: workload out of range: %+v", w)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	systems := make([][]int, w.Groups)
	for g := range systems {
		systems[g] = tokens(rng, w.SystemTokens)
	}
	lognormal := func(mu, sigma float64) int {
		return int(math.Round(math.Exp(mu + sigma*rng.NormFloat64())))
	}
	utterance := func() int { return min(max(lognormal(utteranceMu, utteranceSigma), 1), maxUtterance) }
	out := make([]*conversation, w.Conversations)
	for i := range out {
		c := &conversation{stream: append(make([]int, 0, w.Context), systems[rng.IntN(w.Groups)]...)}
		exchanges := max(1, (lognormal(sessionMu, sessionSigma)+1)/2)
		for range exchanges {
			u, a := utterance()+userTemplateTokens, utterance()+answerTemplateTokens
			if len(c.stream)+u+a > w.Context-1 {
				break
			}
			c.stream = append(c.stream, tokens(rng, u)...)
			c.promptEnd = append(c.promptEnd, len(c.stream))
			c.stream = append(c.stream, tokens(rng, a)...)
			c.answerEnd = append(c.answerEnd, len(c.stream))
			c.think = append(c.think, time.Duration(rng.ExpFloat64()*float64(w.Think)))
		}
		out[i] = c
	}
	w.regenerate(out)
	return out, nil
}

// regenerate sends a share w.Regenerate of the turns of convs again (see
// Workload), drawn from a generator of their own, so the conversations
// are the same with the share or without it. The repeat's prompt and
// answer are the turn's: the simulated answer is the same tokens, as a
// deterministic server's.
func (w Workload) regenerate(convs []*conversation) {
	if w.Regenerate <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x7e9e4))
	for _, c := range convs {
		var prompts, answers []int
		var think []time.Duration
		for t := range c.turns() {
			prompts, answers = append(prompts, c.promptEnd[t]), append(answers, c.answerEnd[t])
			if rng.Float64() < w.Regenerate {
				think = append(think, time.Duration(rng.ExpFloat64()*float64(w.Think)/6))
				prompts, answers = append(prompts, c.promptEnd[t]), append(answers, c.answerEnd[t])
			}
			think = append(think, c.think[t])
		}
		c.promptEnd, c.answerEnd, c.think = prompts, answers, think
	}
}

// tokens draws n token ids.
func tokens(rng *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1 + rng.IntN(vocabulary-1)
	}
	return out
}

// arrive gives the conversations Poisson start times at rate per second.
func arrive(convs []*conversation, rate float64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xa441))
	at := 0.0
	for _, c := range convs {
		at += rng.ExpFloat64() / rate
		c.start = time.Duration(at * float64(time.Second))
	}
}

// TraceContext is the KV tokens per slot a trace needs: its longest
// request (prompt and answer), rounded up to a power of two (context sizes
// are set so), at least least. A smaller slot cannot hold the request at
// all, so every such request would count as an error of the routing.
func TraceContext(trace []*conversation, least int) int {
	longest := 0
	for _, c := range trace {
		longest = max(longest, len(c.stream))
	}
	ctx := max(least, 1)
	for ctx < longest {
		ctx *= 2
	}
	return ctx
}

// TraceOver counts the requests of trace longer than ctx tokens.
func TraceOver(trace []*conversation, ctx int) int {
	n := 0
	for _, c := range trace {
		if len(c.stream) > ctx {
			n++
		}
	}
	return n
}

// MooncakeBlockTokens is the tokens per hash id of the Mooncake traces
// (kvcache-ai/Mooncake, FAST'25 traces: a hash id names a 512-token block,
// and equal ids are equal prefixes).
const MooncakeBlockTokens = 512

// mooncakeRecord is one line of a Mooncake trace.
type mooncakeRecord struct {
	Timestamp    float64 `json:"timestamp"` // ms since the trace began
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// ReadMooncake reads a trace in the Mooncake format (JSON lines of
// timestamp, input_length, output_length, hash_ids) into one single-turn
// conversation per request, arriving at its timestamp. A hash id's tokens
// are drawn from the id alone, so requests sharing ids share those
// prefixes token for token; the answer's are drawn per request.
func ReadMooncake(r io.Reader) ([]*conversation, error) {
	var out []*conversation
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec mooncakeRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if rec.InputLength <= 0 || rec.OutputLength < 0 || rec.Timestamp < 0 {
			return nil, fmt.Errorf("trace line %d: input_length %d, output_length %d, timestamp %v", line, rec.InputLength, rec.OutputLength, rec.Timestamp)
		}
		stream := make([]int, 0, rec.InputLength+rec.OutputLength+1)
		for _, h := range rec.HashIDs {
			rng := rand.New(rand.NewPCG(uint64(h), 0x6d6f6f6e))
			stream = append(stream, tokens(rng, MooncakeBlockTokens)...)
		}
		rng := rand.New(rand.NewPCG(uint64(line), 0x72657175))
		if len(stream) < rec.InputLength {
			stream = append(stream, tokens(rng, rec.InputLength-len(stream))...)
		}
		stream = stream[:rec.InputLength]
		stream = append(stream, tokens(rng, max(rec.OutputLength, 1))...)
		at := time.Duration(rec.Timestamp * float64(time.Millisecond))
		out = append(out, &conversation{stream: stream, promptEnd: []int{rec.InputLength}, answerEnd: []int{len(stream)},
			think: []time.Duration{0}, at: []time.Duration{at}, start: at})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace: no requests")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}
