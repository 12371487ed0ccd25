package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"kvwin/engine"
)

// infoBackend is a backend that only describes itself.
type infoBackend struct{ info engine.Info }

func (b infoBackend) Info() engine.Info { return b.info }

func (b infoBackend) Generate(context.Context, engine.Request, engine.StreamFunc) (engine.Result, error) {
	return engine.Result{}, errors.New("not for generating")
}

// members builds one member per info, healthy unless named in down, suspect
// if named in suspect.
func members(t *testing.T, infos []engine.Info, down, suspect []string) []*member {
	t.Helper()
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var out []*member
	for i, info := range infos {
		m, err := newMember(i, infoBackend{info}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.state.healthy.Store(!slices.Contains(down, info.Name))
		m.state.suspect.Store(slices.Contains(suspect, info.Name))
		out = append(out, m)
	}
	return out
}

func names(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

func TestFilters(t *testing.T) {
	infos := []engine.Info{
		{Name: "a", Model: "m", ContextSlot: 1000},
		{Name: "b", Model: "other", ContextSlot: 4000},
		{Name: "c", Model: "", ContextSlot: 0},
		{Name: "d", Model: "m", ContextSlot: 4000},
	}
	ms := members(t, infos, []string{"d"}, []string{"c"})
	for _, tc := range []struct {
		name    string
		filters []filter
		want    []string
	}{
		{"healthy", []filter{healthy}, []string{"a", "b", "c"}},
		{"fails fast", []filter{failsFast}, []string{"a", "b", "d"}},
		{"serves m (or names no model)", []filter{servesModel("m")}, []string{"a", "c", "d"}},
		{"a turn naming no model: every backend", []filter{servesModel("")}, []string{"a", "b", "c", "d"}},
		{"fits 1000 tokens (a slot of 1000 does not)", []filter{fitsPrompt(1000)}, []string{"b", "c", "d"}},
		{"fits 999 tokens", []filter{fitsPrompt(999)}, []string{"a", "b", "c", "d"}},
		{"healthy and serving m", []filter{healthy, servesModel("m")}, []string{"a", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(keep(ms, tc.filters...)); !slices.Equal(got, tc.want) {
				t.Errorf("kept %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLiveFallsBackToBackendsThatFailFast(t *testing.T) {
	infos := []engine.Info{{Name: "a", Model: "m"}, {Name: "b", Model: "m"}, {Name: "c", Model: "x"}}
	for _, tc := range []struct {
		name          string
		down, suspect []string
		model         string
		want          []string
		unavailable   bool
	}{
		{"healthy ones", []string{"a"}, nil, "m", []string{"b"}, false},
		{"none healthy: those not timed out", []string{"a", "b", "c"}, []string{"a"}, "m", []string{"b"}, false},
		{"none healthy, all timed out", []string{"a", "b", "c"}, []string{"a", "b"}, "m", nil, true},
		{"no backend serves the model", nil, nil, "y", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Router{members: members(t, infos, tc.down, tc.suspect)}
			live, err := r.live(tc.model)
			if got := names(live); !slices.Equal(got, tc.want) || errors.Is(err, engine.ErrUnavailable) != tc.unavailable {
				t.Errorf("live %v, err %v; want %v, unavailable %v", got, err, tc.want, tc.unavailable)
			}
		})
	}
}

func TestFittingSaysTheLargestSlot(t *testing.T) {
	ms := members(t, []engine.Info{{Name: "a", ContextSlot: 100}, {Name: "b", ContextSlot: 300}}, nil, nil)
	if fits, err := fitting(ms, 200); err != nil || !slices.Equal(names(fits), []string{"b"}) {
		t.Fatalf("200 tokens: %v, %v", names(fits), err)
	}
	_, err := fitting(ms, 300)
	var tooLong *engine.ContextLengthError
	if !errors.As(err, &tooLong) || tooLong.PromptTokens != 300 || tooLong.Limit != 300 {
		t.Fatalf("300 tokens: %v, want a context-length error naming 300 of 300", err)
	}
}

func TestClassify(t *testing.T) {
	tooLong := &engine.ContextLengthError{PromptTokens: 500, Limit: 400}
	for _, tc := range []struct {
		name      string
		err       error
		started   bool
		cancelled bool
		believed  int
		want      failure
	}{
		{"timeout", fmt.Errorf("x: %w", engine.ErrTimeout), false, false, 0, timedOut},
		{"queue full", engine.ErrQueueFull, false, false, 0, busy},
		{"unavailable", engine.ErrUnavailable, false, false, 0, down},
		{"closed", engine.ErrClosed, false, false, 0, down},
		{"after the first byte", engine.ErrUnavailable, true, false, 0, fatal},
		{"the client went away", engine.ErrTimeout, false, true, 0, fatal},
		{"not worth retrying", engine.ErrInvalidRequest, false, false, 0, fatal},
		{"too long for a backend believed to hold it", tooLong, false, false, 1000, shrank},
		{"too long, slot size unknown", tooLong, false, false, 0, shrank},
		{"too long, as the router knew", tooLong, false, false, 400, fatal},
		{"no logprobs", fmt.Errorf("o: %w", engine.ErrNoLogprobs), false, false, 0, noLogprobs},
		{"no logprobs after the first byte", engine.ErrNoLogprobs, true, false, 0, fatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err, tc.started, tc.cancelled, tc.believed, 500); got != tc.want {
				t.Errorf("classify = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTallyErr(t *testing.T) {
	tooLong := &engine.ContextLengthError{PromptTokens: 5, Limit: 4}
	for _, tc := range []struct {
		name   string
		failed []failure
		errs   []error
		want   error
	}{
		{"all shrank: the client's answer", []failure{shrank, shrank}, []error{tooLong, tooLong}, tooLong},
		{"none can report logprobs", []failure{noLogprobs}, []error{engine.ErrNoLogprobs}, engine.ErrNoLogprobs},
		{"busy or without logprobs", []failure{busy, noLogprobs}, []error{engine.ErrQueueFull, engine.ErrNoLogprobs}, engine.ErrQueueFull},
		{"a timeout among them", []failure{down, timedOut}, []error{engine.ErrUnavailable, engine.ErrTimeout}, engine.ErrTimeout},
		{"down", []failure{down, busy}, []error{engine.ErrUnavailable, engine.ErrQueueFull}, engine.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl tally
			for i, f := range tc.failed {
				tl.note(fmt.Sprint("b", i), f, tc.errs[i])
			}
			if err := tl.err(); !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestScorers(t *testing.T) {
	ms := time.Millisecond
	cands := []candidate{
		{index: 0, name: "a", load: 0, slots: 1, predicted: 90 * ms, holdingSlot: 0, cached: 100, prefer: -1},
		{index: 1, name: "b", load: 2, slots: 4, predicted: 10 * ms, holdingSlot: 1, cached: 10, prefer: -1},
		{index: 2, name: "c", load: 1, slots: 1, predicted: 50 * ms, holdingSlot: -1, hasPlan: true, plan: 3, prefer: -1},
	}
	order := func(cs []candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	p := prompt{root: 1, length: 150}
	cfg := DefaultConfig()

	pre := prefixScorer{cfg: cfg}.rank(cands, p)
	if got := order(pre); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("prefix: %v, want by predicted time", got)
	}
	prefers := map[string]int{}
	for _, c := range pre {
		prefers[c.name] = c.prefer
	}
	// a holds 100 of 150 (a continuation), b 10 (not), c is planned.
	if want := map[string]int{"a": 0, "b": -1, "c": 3}; fmt.Sprint(prefers) != fmt.Sprint(want) {
		t.Errorf("prefix prefers %v, want %v", prefers, want)
	}
	if got := order(leastLoaded{}.rank(cands, p)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("least-loaded: %v, want by load per slot", got)
	}
	rr := &roundRobin{}
	for i, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}} {
		if got := order(rr.rank(cands, p)); !slices.Equal(got, want) {
			t.Errorf("round-robin turn %d: %v, want %v", i, got, want)
		}
	}
	for name, s := range map[string]scorer{"least-loaded": leastLoaded{}, "round-robin": &roundRobin{}, "random": randomOrder{}} {
		for _, c := range s.rank(cands, p) {
			if c.prefer != -1 {
				t.Errorf("%s prefers slot %d of %s: only the prefix policy places turns", name, c.prefer, c.name)
			}
		}
	}
	if len(randomOrder{}.rank(cands, p)) != len(cands) {
		t.Error("random lost candidates")
	}
	// The hot-spot guard: b's load exceeds the others' by far.
	hot := slices.Clone(cands)
	hot[1].load = 20
	if got := order(prefixScorer{cfg: cfg}.rank(hot, p)); got[0] != "a" {
		t.Errorf("guarded prefix: %v, want the least loaded first", got)
	}
}

// A busy backend holding the conversation and an idle one holding none of
// it can be predicted alike (the queue ahead making up for the prefill
// saved, as under the uncalibrated prior): that is no tie for rendezvous
// hashing to break, or the conversation leaves its slot for a recompute
// of all it held. Figures of a turn the 2-in-flight placement test once
// moved so.
func TestPrefixTieDoesNotTradeAQueueForARecompute(t *testing.T) {
	ms := time.Millisecond
	cands := []candidate{
		{index: 0, name: "idle", predicted: 685 * ms, prefill: 685 * ms, slack: 32 * ms, plan: 1, hasPlan: true, holdingSlot: -1},
		{index: 1, name: "own", load: 1, cached: 1136, predicted: 625 * ms, prefill: 117 * ms, slack: 32 * ms, plan: 0, hasPlan: true, holdingSlot: -1},
	}
	sc := prefixScorer{cfg: DefaultConfig()}
	for root := range uint64(64) {
		if got := sc.rank(cands, prompt{root: root, length: 1371})[0].name; got != "own" {
			t.Fatalf("root %d: ranked %s first", root, got)
		}
	}
	// Within TieTokens' time of each other the two are a tie again, and
	// rendezvous hashing spreads such turns over both.
	cands[0].prefill, cands[0].predicted = 140*ms, 640*ms
	seen := map[string]bool{}
	for root := range uint64(64) {
		seen[sc.rank(cands, prompt{root: root, length: 1371})[0].name] = true
	}
	if !seen["own"] || !seen["idle"] {
		t.Fatalf("near-equal prefills ranked first: %v, want both", seen)
	}
}

func TestPrefer(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    candidate
		want int
	}{
		{"planned", candidate{hasPlan: true, plan: 2, holdingSlot: 1, cached: 100}, 2},
		{"planned, every slot busy", candidate{hasPlan: true, plan: -1, holdingSlot: 1, cached: 100}, -1},
		{"a continuation", candidate{holdingSlot: 1, cached: 50}, 1},
		{"a shared prefix only", candidate{holdingSlot: 1, cached: 49}, -1},
		{"isolated: the held slot for the tenant pin to weigh", candidate{isolated: true, holdingSlot: 1, cached: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := prefer(tc.c, 100); got != tc.want {
				t.Errorf("prefer = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPlace(t *testing.T) {
	r := &Router{}
	m := members(t, []engine.Info{{Name: "a", Slots: 2}}, nil, nil)[0]
	for _, tc := range []struct {
		name   string
		asked  int
		prefer int
		want   int
	}{
		{"the scorer's slot", -1, 1, 1},
		{"the client's own pin first", 0, 1, 0},
		{"never a slot the backend no longer has", -1, 2, -1},
		{"none", -1, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := engine.Request{Slot: tc.asked, NoCache: true}
			pl, err := r.place(context.Background(), m, candidate{prefer: tc.prefer}, req, 10)
			if err != nil || pl.slot != tc.want || pl.claimed || !pl.noCache {
				t.Errorf("placed %+v, %v; want slot %d, unclaimed, the request's NoCache", pl, err, tc.want)
			}
		})
	}
}

func TestDecisionTimeIsTheRoutersClock(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var got []Decision
	r := newRouter(t, Config{Now: func() time.Time { return at }, Observe: func(d Decision) { got = append(got, d) }}, newFake("a"))
	generate(t, r, conv(0, 1))
	if len(got) != 1 || !got[0].Time.Equal(at) || got[0].Chosen != "a" {
		t.Fatalf("decisions %+v, want one at %v on a", got, at)
	}
}

func TestUsageChecksThenCaps(t *testing.T) {
	r := &Router{log: slog.New(slog.DiscardHandler)}
	m := members(t, []engine.Info{{Name: "a", ContextSlot: 1000}}, nil, nil)[0]
	m.exact = true
	k := key{tokens: make([]int, 64), length: 64}
	c := candidate{tenantUnits: 32, promptUnits: 64}
	for _, tc := range []struct {
		name               string
		capped             bool
		reported           engine.Timings
		checked, forTenant int // cached tokens checked, and as the tenant is told
	}{
		{"more cached than the prompt, capped", true, engine.Timings{PromptTokens: 64, CachedTokens: 70}, 64, 32},
		{"more cached than the prompt, one tenant", false, engine.Timings{PromptTokens: 64, CachedTokens: 70}, 64, 64},
		{"within its own prefix", true, engine.Timings{PromptTokens: 64, CachedTokens: 16}, 16, 16},
		{"negative", true, engine.Timings{PromptTokens: 64, CachedTokens: -5}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := usage{r: r, m: m, k: k, c: c, capped: tc.capped}
			if got := u.checked(tc.reported, nil).CachedTokens; got != tc.checked {
				t.Errorf("checked: %d cached, want %d", got, tc.checked)
			}
			if got := u.forTenant(u.checked(tc.reported, nil)).CachedTokens; got != tc.forTenant {
				t.Errorf("for the tenant: %d cached, want %d", got, tc.forTenant)
			}
			var events []engine.Timings
			s := u.stream(func(ev engine.Event) error { events = append(events, ev.Timings); return nil })
			_ = s(engine.Event{First: true, Timings: tc.reported})
			_ = s(engine.Event{Timings: engine.Timings{PromptTokens: 64, CachedTokens: 48}})
			if events[0].CachedTokens != tc.forTenant {
				t.Errorf("first event: %d cached, want %d", events[0].CachedTokens, tc.forTenant)
			}
			if want := map[bool]int{true: 32, false: 48}[tc.capped]; events[1].CachedTokens != want {
				t.Errorf("later event: %d cached, want %d (capped, not checked)", events[1].CachedTokens, want)
			}
		})
	}
	if u := (usage{}); u.stream(nil) != nil {
		t.Error("a nil stream stays nil")
	}
}
