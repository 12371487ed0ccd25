package engine

import (
	"context"
	"fmt"
	"reflect"
)

// Unwrapper is implemented by a backend that wraps another (a catalog's
// model entry, a remote model serving a router under its own name): Unwrap
// returns the backend it holds, nil if it holds none now. It never loads:
// finding an ability costs nothing. A wrapper need not forward the
// abilities of what it wraps: As finds them.
type Unwrapper interface {
	Unwrap() Backend
}

// Holder is implemented by a wrapper whose backend must be loaded, and kept
// loaded, to be used (a catalog's model entry): Hold loads it if it is not
// and holds it until release is called.
type Holder interface {
	Hold(ctx context.Context) (b Backend, release func(), err error)
}

// Hold finds ability T as As does, but a Holder in b's chain loads and
// holds what it wraps: use the ability, then call release (always non-nil;
// a no-op when nothing was held). Not found, it is an error wrapping
// ErrNotSupported; a load that fails is that load's error.
func Hold[T any](ctx context.Context, b Backend) (T, func(), error) {
	var zero T
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for b != nil {
		if t, ok := b.(T); ok {
			return t, release, nil
		}
		if h, ok := b.(Holder); ok {
			inner, rel, err := h.Hold(ctx)
			if err != nil {
				release()
				return zero, func() {}, err
			}
			releases = append(releases, rel)
			b = inner
			continue
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	release()
	return zero, func() {}, fmt.Errorf("no %v: %w", reflect.TypeFor[T](), ErrNotSupported)
}

// As finds the first backend in b's chain (b, then what b unwraps to, and
// so on, as errors.As walks an error's chain) that is a T, and returns it:
// the way to ask for an optional ability (Tokenizer, SlotReader, …, or a
// concrete type) of a backend that may be wrapped. A wrapper that has the
// ability itself is found before what it wraps. As never loads: what an
// unloaded catalog model's engine can do is found once it is loaded; to
// use an ability through such a wrapper, Hold it.
func As[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	var zero T
	return zero, false
}
