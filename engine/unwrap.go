package engine

// Unwrapper is implemented by a backend that wraps another (a catalog's
// model entry, a remote model serving a router under its own name): Unwrap
// returns the backend it holds, nil if it holds none now. A wrapper need
// not forward the abilities of what it wraps: As finds them.
type Unwrapper interface {
	Unwrap() Backend
}

// As finds the first backend in b's chain (b, then what b unwraps to, and
// so on, as errors.As walks an error's chain) that is a T, and returns it:
// the way to ask for an optional ability (Tokenizer, SlotReader, …, or a
// concrete type) of a backend that may be wrapped. A wrapper that has the
// ability itself is found before what it wraps. Whether Unwrap blocks is
// the wrapper's to say (a catalog entry loads its model).
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
