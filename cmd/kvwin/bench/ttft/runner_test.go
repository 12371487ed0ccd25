package ttft

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func fiveTurns() Conversation {
	return Conversation{System: "You are a test.", Turns: []Turn{
		{"one", "reply one"}, {"two", "reply two"}, {"three", "reply three"}, {"four", "reply four"}, {"five", "reply five"},
	}}
}

func TestRunnerReplaysTheWorkload(t *testing.T) {
	tests := []struct {
		name        string
		policy      Policy
		sample      int
		stepsAt     []int
		wantTurns   []int
		wantHeader  string
		wantCache   bool
		wantEvicted []int
	}{
		{"full", Full, 0, nil, []int{1, 2, 3, 4, 5}, "full", true, nil},
		{"full-nocache sampled", FullNoCache, 2, nil, []int{1, 3, 5}, "full", false, nil},
		{"full-nocache sample reaches the last turn", FullNoCache, 3, nil, []int{1, 4, 5}, "full", false, nil},
		{"sample is for full-nocache only", Full, 3, nil, []int{1, 2, 3, 4, 5}, "full", true, nil},
		{"sink steps", Sink, 0, []int{3, 5}, []int{1, 2, 3, 4, 5}, "sink", true, []int{3, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeServer{policies: []string{"full", "sink"}, stepsAt: tt.stepsAt}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			var progressed []int
			conv := fiveTurns()
			got, err := Runner{BaseURL: srv.URL + "/", Policy: tt.policy, Sample: tt.sample,
				Progress: func(r TurnResult, n int) {
					if n != 5 {
						t.Errorf("progress of %d turns, want 5", n)
					}
					progressed = append(progressed, r.Turn)
				}}.Run(context.Background(), conv)
			if err != nil {
				t.Fatal(err)
			}
			var turns, evicted []int
			for _, r := range got {
				turns = append(turns, r.Turn)
				if r.Evicted {
					evicted = append(evicted, r.Turn)
				}
			}
			if !slices.Equal(turns, tt.wantTurns) || !slices.Equal(progressed, tt.wantTurns) || !slices.Equal(evicted, tt.wantEvicted) {
				t.Fatalf("turns %v (progress %v), evicted at %v; want %v, evicted at %v", turns, progressed, evicted, tt.wantTurns, tt.wantEvicted)
			}
			reqs := fake.recorded(t)
			if len(reqs) != len(tt.wantTurns) {
				t.Fatalf("%d requests, want %d", len(reqs), len(tt.wantTurns))
			}
			count, _ := ChatMLCounter(1)
			for i, req := range reqs {
				turn := tt.wantTurns[i]
				b := req.body
				if req.policy != tt.wantHeader || !b.Stream || b.MaxTokens != 8 || !b.IgnoreEOS || b.CachePrompt != tt.wantCache {
					t.Fatalf("turn %d: policy header %q, body %+v", turn, req.policy, b)
				}
				// temperature 0 must be on the wire, not left to the server's default.
				if v, ok := req.raw["temperature"]; !ok || v != 0.0 {
					t.Fatalf("turn %d: temperature %v (sent %v)", turn, v, ok)
				}
				if want := conv.Messages(turn, ""); !slices.Equal(b.Messages, want) {
					t.Fatalf("turn %d: sent %v, want the workload's history %v", turn, b.Messages, want)
				}
				r := got[i]
				if r.HistoryTokens != count(b.Messages) || r.PromptTokens != r.HistoryTokens ||
					r.NewTokens != r.PromptTokens-r.CachedTokens || r.PromptMs != 0.25*float64(r.NewTokens) || r.TTFTMs <= 0 {
					t.Fatalf("turn %d: %+v", turn, r)
				}
				if cached := r.CachedTokens > 0; cached != (tt.wantCache && turn > 1) {
					t.Fatalf("turn %d: cached %d tokens", turn, r.CachedTokens)
				}
			}
			if last := got[len(got)-1]; last.Step != len(tt.stepsAt) {
				t.Fatalf("last step %d, want %d", last.Step, len(tt.stepsAt))
			}
		})
	}
}

func TestRunnerReportsWhatWentWrong(t *testing.T) {
	tests := []struct {
		name      string
		fake      *fakeServer
		policy    Policy
		wantTurns int
		is        error
		want      []string
	}{
		{"a policy the server rejects", &fakeServer{policies: []string{"full"}}, Memory, 0, nil,
			[]string{"policy memory", "rejected turn 1 with 400", "invalid_value", `unknown window policy "memory"`, "window layer"}},
		{"a policy the server ignores", &fakeServer{policies: []string{"full", "sliding"}, noWindow: true}, Sliding, 0, ErrPolicyIgnored,
			[]string{"policy sliding, turn 1", "no X-Kvwin-Window header"}},
		{"full needs no window header", &fakeServer{policies: []string{"full"}, noWindow: true}, Full, 5, nil, nil},
		{"an in-stream error", &fakeServer{policies: []string{"full"}, failStream: 3}, Full, 2, nil,
			[]string{"policy full turn 3", "in-stream error: engine closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.fake)
			defer srv.Close()
			got, err := Runner{BaseURL: srv.URL, Policy: tt.policy}.Run(context.Background(), fiveTurns())
			if len(got) != tt.wantTurns {
				t.Fatalf("%d turns measured, want %d", len(got), tt.wantTurns)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("%v is not %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	var rej *RejectedError
	srv := httptest.NewServer(&fakeServer{policies: []string{"full"}})
	defer srv.Close()
	_, err := Runner{BaseURL: srv.URL, Policy: Sink}.Run(context.Background(), fiveTurns())
	if !errors.As(err, &rej) || rej.Status != 400 || rej.Turn != 1 || rej.Policy != Sink {
		t.Fatalf("error %#v, want a *RejectedError for sink's turn 1", err)
	}
}
