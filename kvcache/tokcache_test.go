package kvcache

import (
	"errors"
	"slices"
	"testing"
)

func TestTokenCache(t *testing.T) {
	tc, err := NewTokenCache(TokenCacheConfig{MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	sys := []int{1, 2, 3, 4}
	tc.Put("tiny/chatml", "system", "You are terse.", sys)
	tc.Put("tiny/chatml", "user", "hi", []int{9})
	tc.Put("tiny/chatml", "user", "too long", make([]int, 5000)) // costs more than the cache holds
	tc.Wait()

	for _, c := range []struct {
		name                     string
		tokenizer, role, content string
		want                     []int
		hit                      bool
	}{
		{"cached message", "tiny/chatml", "system", "You are terse.", sys, true},
		{"another message", "tiny/chatml", "user", "hi", []int{9}, true},
		{"same content, other role", "tiny/chatml", "user", "You are terse.", nil, false},
		{"same message, other tokenizer", "tiny/llama3", "system", "You are terse.", nil, false},
		{"fields do not run together", "tiny/chatml", "systemYou", " are terse.", nil, false},
		{"over the cost bound", "tiny/chatml", "user", "too long", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := []int{100, 101}
			got, ok := tc.Append(slices.Clone(prefix), c.tokenizer, c.role, c.content)
			if ok != c.hit {
				t.Fatalf("hit = %v, want %v", ok, c.hit)
			}
			if want := append(slices.Clone(prefix), c.want...); !slices.Equal(got, want) {
				t.Fatalf("Append = %v, want %v", got, want)
			}
			if n, ok := tc.Len(c.tokenizer, c.role, c.content); ok != c.hit || n != len(c.want) {
				t.Fatalf("Len = %d, %v; want %d, %v", n, ok, len(c.want), c.hit)
			}
		})
	}

	// What Append returns is the caller's: changing it changes no cached ids.
	got, _ := tc.Append(nil, "tiny/chatml", "system", "You are terse.")
	got[0] = 999
	if again, _ := tc.Append(nil, "tiny/chatml", "system", "You are terse."); !slices.Equal(again, sys) {
		t.Fatalf("cached ids changed to %v", again)
	}
	if hits, misses := tc.Stats(); hits != 6 || misses != 8 {
		t.Fatalf("stats: %d hits %d misses, want 6 and 8", hits, misses)
	}
}

func TestTokenCacheConfig(t *testing.T) {
	if _, err := NewTokenCache(TokenCacheConfig{MaxTokens: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative size: err = %v", err)
	}
	tc, err := NewTokenCache(TokenCacheConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tc.Close()
}
