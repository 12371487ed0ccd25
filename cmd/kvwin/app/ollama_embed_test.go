package app_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	oapi "github.com/ollama/ollama/api"

	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/gguf"
)

// TestOllamaClientEmbed: Ollama's Go client embeds through /api/embed and
// the older /api/embeddings on a real kvwin serve, and gets the vectors
// /v1/embeddings gives for the same inputs: the model's width, unit length,
// one per input in order; an empty input loads and answers none; an input
// of another type is a 400 in Ollama's shape.
func TestOllamaClientEmbed(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	inputs := []string{"a cat sat", "on the mat"}
	res, err := client.Embed(ctx, &oapi.EmbedRequest{Model: "kvwin-tiny", Input: inputs})
	if err != nil {
		t.Fatal(err)
	}
	width := gguf.DefaultTinyConfig().Embedding
	if res.Model != "kvwin-tiny" || len(res.Embeddings) != 2 || res.PromptEvalCount != 2+len("a cat sat")+len("on the mat") {
		t.Fatalf("model %q, %d vectors, prompt_eval_count %d", res.Model, len(res.Embeddings), res.PromptEvalCount)
	}
	var openai struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	body, _ := json.Marshal(map[string]any{"model": "kvwin-tiny", "input": inputs, "encoding_format": "float"})
	resp, err := http.Post(a.URL()+"/v1/embeddings", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&openai)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || len(openai.Data) != 2 {
		t.Fatalf("/v1/embeddings: %d %v", resp.StatusCode, err)
	}
	for i, v := range res.Embeddings {
		norm := 0.0
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		if len(v) != width || math.Abs(norm-1) > 1e-4 {
			t.Errorf("vector %d: width %d (want %d), squared norm %v", i, len(v), width, norm)
		}
		if !slices.Equal(v, openai.Data[i].Embedding) {
			t.Errorf("vector %d differs from /v1/embeddings'", i)
		}
	}
	if slices.Equal(res.Embeddings[0], res.Embeddings[1]) {
		t.Error("different inputs gave the same vector")
	}

	one, err := client.Embeddings(ctx, &oapi.EmbeddingRequest{Model: "kvwin-tiny", Prompt: "on the mat"})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Embedding) != width {
		t.Fatalf("/api/embeddings: width %d", len(one.Embedding))
	}
	for i, x := range one.Embedding {
		if float32(x) != res.Embeddings[1][i] {
			t.Fatalf("/api/embeddings differs from /api/embed at %d: %v vs %v", i, x, res.Embeddings[1][i])
		}
	}

	empty, err := client.Embed(ctx, &oapi.EmbedRequest{Model: "kvwin-tiny", Input: ""})
	if err != nil || len(empty.Embeddings) != 0 {
		t.Fatalf("empty input: %v, %d vectors", err, len(empty.Embeddings))
	}
	_, err = client.Embed(ctx, &oapi.EmbedRequest{Model: "kvwin-tiny", Input: 42})
	var status oapi.StatusError
	if !errors.As(err, &status) || status.StatusCode != http.StatusBadRequest || !strings.Contains(status.ErrorMessage, "invalid input type") {
		t.Fatalf("input 42: %v, want a 400 saying invalid input type", err)
	}
	_, err = client.Embed(ctx, &oapi.EmbedRequest{Model: "other", Input: "x"})
	if !errors.As(err, &status) || status.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %v, want 404", err)
	}
}
