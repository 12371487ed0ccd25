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

// TestOllamaClientModelStore: Ollama's Go client pulls the served model at
// once (status success, streamed), gets a 404 for another, and a
// 501 that says why for the routes of a model store kvwin does not keep.
func TestOllamaClientModelStore(t *testing.T) {
	a := apptest.Start(t, nil)
	client, ctx := ollamaClient(t, a)
	var statuses []string
	err := client.Pull(ctx, &oapi.PullRequest{Model: "kvwin-tiny:latest"}, func(p oapi.ProgressResponse) error {
		statuses = append(statuses, p.Status)
		return nil
	})
	if err != nil || len(statuses) != 1 || statuses[0] != "success" {
		t.Fatalf("pull: %v, statuses %q", err, statuses)
	}
	var status oapi.StatusError
	// The client reads a streamed answer's {"error": …} as a plain error.
	err = client.Pull(ctx, &oapi.PullRequest{Model: "llama3"}, func(oapi.ProgressResponse) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `model "llama3" not found`) {
		t.Fatalf("pull of another model: %v, want model not found", err)
	}
	resp, err := http.Post(a.URL()+"/api/pull", "application/json", strings.NewReader(`{"model":"llama3","stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("pull of another model: status %d, want 404", resp.StatusCode)
	}
	err = client.Delete(ctx, &oapi.DeleteRequest{Model: "kvwin-tiny"})
	if !errors.As(err, &status) || status.StatusCode != http.StatusNotImplemented || !strings.Contains(status.ErrorMessage, "does not delete models") {
		t.Fatalf("delete: %v, want 501 saying kvwin does not delete models", err)
	}
	err = client.Copy(ctx, &oapi.CopyRequest{Source: "kvwin-tiny", Destination: "x"})
	if !errors.As(err, &status) || status.StatusCode != http.StatusNotImplemented {
		t.Fatalf("copy: %v, want 501", err)
	}
}
