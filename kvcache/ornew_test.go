package kvcache

import "testing"

func TestOrNew(t *testing.T) {
	shared, err := New(Config{Backends: []BackendConfig{{Name: "a", CapacityBlocks: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := OrNew(shared, nil); got != shared {
		t.Fatalf("OrNew(shared) = %p, want the shared registry %p", got, shared)
	}
	own := OrNew(nil, nil)
	if own == nil || own == shared {
		t.Fatalf("OrNew(nil) = %p, want a registry of its own", own)
	}
	if err := own.SetBackend(BackendConfig{Name: "b", CapacityBlocks: 1}); err != nil {
		t.Fatalf("the new registry takes a backend: %v", err)
	}
	if got := OrNew(nil, nil); got == own {
		t.Fatal("OrNew(nil) twice returned the same registry")
	}
}
