package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"kvwin/engine"
)

// The answers below generate "é!" as two tokens: the first holds "é"
// (0xC3 0xA9) whole, the second "!". The newer shape of the first entry
// cuts a split character from "token" and keeps it in "bytes", as
// llama-server does; it is whole here, so both agree.

// newShapePartials are a newer llama-server's streamed partials: one token
// each, with its entry.
var newShapePartials = []string{
	`{"content":"é","tokens":[300],"stop":false,"id_slot":0,"completion_probabilities":[` +
		`{"id":300,"token":"é","bytes":[195,169],"logprob":-0.25,"top_logprobs":[` +
		`{"id":300,"token":"é","bytes":[195,169],"logprob":-0.25},{"id":301,"token":"e","bytes":[101],"logprob":-1.5},{"id":302,"token":"","bytes":[195],"logprob":-3}]}]}`,
	`{"content":"!","tokens":[33],"stop":false,"id_slot":0,"completion_probabilities":[` +
		`{"id":33,"token":"!","bytes":[33],"logprob":-0.125,"top_logprobs":[` +
		`{"id":33,"token":"!","bytes":[33],"logprob":-0.125},{"id":34,"token":".","bytes":[46],"logprob":-2.25},{"id":35,"token":"?","bytes":[63],"logprob":-4}]}]}`,
}

// oldShapePartials are an older llama-server's: probabilities, the token's
// text as "content", and the chosen token's probability only as one of the
// alternatives. Its final object repeats every entry, which must not count
// twice.
var oldShapePartials = []string{
	`{"content":"é","stop":false,"completion_probabilities":[{"content":"é","probs":[` +
		`{"tok_str":"é","prob":0.5},{"tok_str":"e","prob":0.25},{"tok_str":"è","prob":0.125}]}]}`,
	`{"content":"!","stop":false,"completion_probabilities":[{"content":"!","probs":[` +
		`{"tok_str":".","prob":0.5},{"tok_str":"?","prob":0.25},{"tok_str":",","prob":0.125}]}]}`,
}

const oldShapeFinal = `{"content":"","stop":true,"stop_type":"limit","tokens_predicted":2,"timings":{"cache_n":0,"prompt_n":3,"predicted_n":2},` +
	`"completion_probabilities":[{"content":"é","probs":[{"tok_str":"é","prob":0.5}]},{"content":"!","probs":[{"tok_str":".","prob":0.5}]}]}`

const newShapeFinal = `{"content":"","stop":true,"stop_type":"limit","tokens_predicted":2,"timings":{"cache_n":0,"prompt_n":3,"predicted_n":2}}`

// wantNew is what newShapePartials mean, top alternatives cut to top.
func wantNew(top int) []engine.TokenLogprob {
	lps := []engine.TokenLogprob{
		{Token: "é", Bytes: []byte("é"), Logprob: -0.25, Top: []engine.TopLogprob{
			{Token: "é", Bytes: []byte("é"), Logprob: -0.25}, {Token: "e", Bytes: []byte("e"), Logprob: -1.5}, {Token: "\xc3", Bytes: []byte{0xc3}, Logprob: -3}}},
		{Token: "!", Bytes: []byte("!"), Logprob: -0.125, Top: []engine.TopLogprob{
			{Token: "!", Bytes: []byte("!"), Logprob: -0.125}, {Token: ".", Bytes: []byte("."), Logprob: -2.25}, {Token: "?", Bytes: []byte("?"), Logprob: -4}}},
	}
	for i := range lps {
		lps[i].Top = lps[i].Top[:top]
		if top == 0 {
			lps[i].Top = nil
		}
	}
	return lps
}

// ln is the float32 log-probability of p, as the adapter computes it.
func ln(p float64) float32 { return float32(math.Log(p)) }

// wantOld is what oldShapePartials mean: "!" is not among its listed
// alternatives, so its own log-probability is unknown (-9999).
var wantOld = []engine.TokenLogprob{
	{Token: "é", Bytes: []byte("é"), Logprob: ln(0.5), Top: []engine.TopLogprob{
		{Token: "é", Bytes: []byte("é"), Logprob: ln(0.5)}, {Token: "e", Bytes: []byte("e"), Logprob: ln(0.25)}, {Token: "è", Bytes: []byte("è"), Logprob: ln(0.125)}}},
	{Token: "!", Bytes: []byte("!"), Logprob: -9999, Top: []engine.TopLogprob{
		{Token: ".", Bytes: []byte("."), Logprob: ln(0.5)}, {Token: "?", Bytes: []byte("?"), Logprob: ln(0.25)}, {Token: ",", Bytes: []byte(","), Logprob: ln(0.125)}}},
}

// TestLogprobs checks that a request for log-probabilities asks the server
// for n_probs before sampling, and that both shapes of its answer, streamed
// and whole, become the engine's log-probabilities: in the events with
// their text, and once each in the result.
func TestLogprobs(t *testing.T) {
	sse := func(objs ...string) string {
		var b strings.Builder
		for _, o := range objs {
			b.WriteString("data: " + o + "\n\n")
		}
		return b.String()
	}
	tests := []struct {
		name      string
		top       int
		answer    string // body
		json      bool   // the answer is one JSON object, not a stream
		wantProbs string // the n_probs part of the request
		want      []engine.TokenLogprob
		wantEvent int // events carrying log-probabilities
	}{
		{name: "newer shape, streamed", top: 3, answer: sse(append(newShapePartials, newShapeFinal)...),
			wantProbs: `"n_probs":3,"post_sampling_probs":false`, want: wantNew(3), wantEvent: 2},
		{name: "newer shape, top 2 of what the server sent", top: 2, answer: sse(append(newShapePartials, newShapeFinal)...),
			wantProbs: `"n_probs":2,"post_sampling_probs":false`, want: wantNew(2), wantEvent: 2},
		{name: "newer shape, no alternatives asked: n_probs 1, none kept", top: 0, answer: sse(append(newShapePartials, newShapeFinal)...),
			wantProbs: `"n_probs":1,"post_sampling_probs":false`, want: wantNew(0), wantEvent: 2},
		{name: "newer shape, one JSON object", top: 3, json: true,
			answer: `{"content":"é!","stop":true,"stop_type":"limit","completion_probabilities":[` +
				strings.TrimSuffix(strings.SplitN(newShapePartials[0], `"completion_probabilities":[`, 2)[1], "]}") + "," +
				strings.TrimSuffix(strings.SplitN(newShapePartials[1], `"completion_probabilities":[`, 2)[1], "]}") + `]}`,
			wantProbs: `"n_probs":3,"post_sampling_probs":false`, want: wantNew(3), wantEvent: 1},
		{name: "older shape, streamed, final repeats them", top: 3, answer: sse(append(oldShapePartials, oldShapeFinal)...),
			wantProbs: `"n_probs":3,"post_sampling_probs":false`, want: wantOld, wantEvent: 2},
		{name: "older shape, only in the final object", top: 1,
			answer:    sse(`{"content":"é","stop":false}`, `{"content":"!","stop":false}`, oldShapeFinal),
			wantProbs: `"n_probs":1,"post_sampling_probs":false`,
			want: []engine.TokenLogprob{
				{Token: "é", Bytes: []byte("é"), Logprob: ln(0.5), Top: []engine.TopLogprob{{Token: "é", Bytes: []byte("é"), Logprob: ln(0.5)}}},
				{Token: "!", Bytes: []byte("!"), Logprob: -9999, Top: []engine.TopLogprob{{Token: ".", Bytes: []byte("."), Logprob: ln(0.5)}}},
			}, wantEvent: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{completion: func(w http.ResponseWriter, r *http.Request) {
				ct := "text/event-stream"
				if tt.json {
					ct = "application/json"
				}
				w.Header().Set("Content-Type", ct)
				fmt.Fprint(w, tt.answer)
			}})
			b := f.backend(t, Config{})
			req := engine.Request{Tokens: []int{1, 2, 3}, Sampling: engine.DefaultSampling(), Slot: -1, Logprobs: true, TopLogprobs: tt.top}
			var evLPs []engine.TokenLogprob
			events := 0
			var text strings.Builder
			res, err := b.Generate(context.Background(), req, func(ev engine.Event) error {
				if len(ev.Logprobs) > 0 {
					events++
				}
				evLPs = append(evLPs, ev.Logprobs...)
				text.WriteString(ev.Text)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if body := f.requests("/completion")[0]; !strings.Contains(body, tt.wantProbs) {
				t.Errorf("request %s lacks %s", body, tt.wantProbs)
			}
			if res.Text != "é!" || text.String() != "é!" {
				t.Errorf("text %q, streamed %q", res.Text, text.String())
			}
			if !reflect.DeepEqual(res.Logprobs, tt.want) {
				t.Errorf("result logprobs\n got %+v\nwant %+v", res.Logprobs, tt.want)
			}
			if !reflect.DeepEqual(evLPs, tt.want) || events != tt.wantEvent {
				t.Errorf("%d events carried logprobs (want %d):\n got %+v\nwant %+v", events, tt.wantEvent, evLPs, tt.want)
			}
		})
	}
}

// TestNoLogprobsNoNProbs: without logprobs asked, n_probs is not sent, and
// probabilities a server sends anyway are not reported.
func TestNoLogprobsNoNProbs(t *testing.T) {
	f := startFake(t, &fakeServer{completion: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, o := range append(newShapePartials, newShapeFinal) {
			fmt.Fprint(w, "data: "+o+"\n\n")
		}
	}})
	b := f.backend(t, Config{})
	res, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1}, Sampling: engine.DefaultSampling(), Slot: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.Unmarshal([]byte(f.requests("/completion")[0]), &body)
	if _, ok := body["n_probs"]; ok || res.Logprobs != nil {
		t.Fatalf("n_probs sent (%v) or logprobs reported (%v)", body["n_probs"], res.Logprobs)
	}
}

// TestLogprobOf: a probability becomes its natural log; 0, NaN and
// anything below float32's range become float32's lowest, which JSON can
// carry where -Inf cannot.
func TestLogprobOf(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		logprob, prob *float64
		want          float32
		ok            bool
	}{
		{logprob: f(-1.5), want: -1.5, ok: true},
		{prob: f(0.25), want: float32(math.Log(0.25)), ok: true},
		{prob: f(0), want: -math.MaxFloat32, ok: true},
		{logprob: f(math.NaN()), want: -math.MaxFloat32, ok: true},
		{logprob: f(-1e300), want: -math.MaxFloat32, ok: true},
		{logprob: f(0.5), want: 0, ok: true},
		{want: 0, ok: false},
	}
	for i, tt := range tests {
		got, ok := logprobOf(tt.logprob, tt.prob)
		if got != tt.want || ok != tt.ok {
			t.Errorf("case %d: %v %v, want %v %v", i, got, ok, tt.want, tt.ok)
		}
	}
}
