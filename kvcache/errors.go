package kvcache

import "errors"

// Sentinel errors, wrapped with the value that failed. None of them is a
// reason to fail a request: a caller that gets one serves the turn without
// the registry's help.
var (
	// ErrInvalidConfig: a configuration value is out of range.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrInvalidChain: a Chain's keys do not match its length and block size.
	ErrInvalidChain = errors.New("invalid key chain")
	// ErrUnknownBackend: the backend was never added with SetBackend.
	ErrUnknownBackend = errors.New("unknown backend")
	// ErrInvalidSlot: a slot id is negative.
	ErrInvalidSlot = errors.New("invalid slot")
	// ErrInvalidSnapshot: a snapshot has no id or a negative size.
	ErrInvalidSnapshot = errors.New("invalid snapshot")
	// ErrUnknownSnapshot: no snapshot of that id is recorded for the backend.
	ErrUnknownSnapshot = errors.New("unknown snapshot")
)
