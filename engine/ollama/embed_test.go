package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"kvwin/engine"
)

func TestEmbedAsksOllamaAndKeepsOrder(t *testing.T) {
	answers := []string{`{"model":"m","embeddings":[[1,0],[0,1]],"prompt_eval_count":7}`, `{"embeddings":[[1,0]]}`}
	f := startFake(t, &fakeOllama{embed: func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, answers[0])
		answers = answers[1:] // the test's calls are sequential
	}})
	b := newBackend(t, f, Config{})
	got, err := b.Embed(context.Background(), engine.EmbedRequest{Inputs: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Vectors) != 2 || !slices.Equal(got.Vectors[1], []float32{0, 1}) || got.PromptTokens != 7 {
		t.Fatalf("got %+v", got)
	}
	var sent struct {
		Model    string
		Input    []string
		Truncate *bool
	}
	if err := json.Unmarshal([]byte(f.requests("/api/embed")[0].body), &sent); err != nil || sent.Model != "m" ||
		!slices.Equal(sent.Input, []string{"a", "b"}) || sent.Truncate == nil || *sent.Truncate {
		t.Fatalf("sent %+v (%v); want model m, both inputs, truncate false", sent, err)
	}

	// A wrong count is the backend's fault, not the client's.
	if _, err := b.Embed(context.Background(), engine.EmbedRequest{Inputs: []string{"a", "b"}}); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("one vector for two inputs: %v, want unavailable", err)
	}
}

func TestJSONOutputBecomesOllamasFormat(t *testing.T) {
	f := startFake(t, &fakeOllama{})
	b := newBackend(t, f, Config{})
	for _, tc := range []struct {
		out  *engine.Output
		want string
	}{
		{&engine.Output{}, `"json"`},
		{&engine.Output{Schema: []byte(`{"type":"object"}`)}, `{"type":"object"}`},
	} {
		req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: engine.DefaultSampling(), Slot: -1}
		req.Sampling.Output = tc.out
		if _, err := b.Generate(context.Background(), req, nil); err != nil {
			t.Fatal(err)
		}
		calls := f.requests("/api/chat")
		var sent struct{ Format json.RawMessage }
		if err := json.Unmarshal([]byte(calls[len(calls)-1].body), &sent); err != nil || string(sent.Format) != tc.want {
			t.Errorf("format %s, want %s", sent.Format, tc.want)
		}
	}
	req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: engine.DefaultSampling(), Slot: -1}
	req.Sampling.Output = &engine.Output{Prefix: "<tool_call>\n"}
	if _, err := b.Generate(context.Background(), req, nil); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("a wrapped output: %v, want invalid", err)
	}
}
