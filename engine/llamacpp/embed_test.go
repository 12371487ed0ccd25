package llamacpp

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"kvwin/engine"
	"kvwin/gguf"
)

func TestEmbeddingsAreUnitVectorsOfTheModelWidthAndDeterministic(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 2, Ctx: 512})
	ctx := context.Background()
	// Fill a slot with other text first: an embedding must not depend on
	// what the engine held before.
	chat(t, e, []engine.Message{{Role: engine.RoleUser, Content: "the cache holds this"}}, 4)
	got, err := e.Embed(ctx, engine.EmbedRequest{Inputs: []string{"a cat sat", "on the mat", "a cat sat"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Vectors) != 3 || got.PromptTokens != 3*1+len("a cat sat")*2+len("on the mat") {
		t.Fatalf("%d vectors, %d prompt tokens; want 3 and %d (one per byte plus BOS)", len(got.Vectors), got.PromptTokens, 3+len("a cat sat")*2+len("on the mat"))
	}
	width := gguf.DefaultTinyConfig().Embedding
	for i, v := range got.Vectors {
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		if len(v) != width || math.Abs(sum-1) > 1e-4 {
			t.Errorf("vector %d: width %d, squared norm %g; want %d and 1", i, len(v), sum, width)
		}
	}
	if !slices.Equal(got.Vectors[0], got.Vectors[2]) {
		t.Error("identical inputs gave different vectors")
	}
	if slices.Equal(got.Vectors[0], got.Vectors[1]) {
		t.Error("different inputs gave the same vector")
	}
	again, err := e.Embed(ctx, engine.EmbedRequest{Inputs: []string{"on the mat"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Vectors[0], got.Vectors[1]) {
		t.Error("the same input embedded again gave another vector")
	}
	if _, err := e.Embed(ctx, engine.EmbedRequest{Inputs: []string{"x", ""}}); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("an empty input: %v, want invalid", err)
	}
}
