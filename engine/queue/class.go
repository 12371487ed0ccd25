package queue

import (
	"fmt"
	"strings"
)

// Class is a request's priority class. The zero value is Interactive, so
// a request that names none is served as every request was before classes.
type Class uint8

// The classes, highest first: a lower value is served first.
const (
	// Interactive is a person waiting for the first token.
	Interactive Class = iota
	// Batch is work nobody watches token by token (evaluations, offline
	// jobs): it waits while interactive requests wait, within the
	// starvation bound (Config.BatchEvery).
	Batch
)

// classes counts the classes.
const classes = 2

var classNames = [classes]string{Interactive: "interactive", Batch: "batch"}

// String returns the class's name as a header or the keys file writes it.
func (c Class) String() string {
	if int(c) < classes {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", c)
}

// ParseClass reads a class name, ignoring case and surrounding space.
// Anything else is an error naming what was sent (quoted, so a hostile
// value cannot forge a log line).
func ParseClass(s string) (Class, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for c, n := range classNames {
		if name == n {
			return Class(c), nil
		}
	}
	return 0, fmt.Errorf("priority class %.64q: want %q or %q", s, classNames[Interactive], classNames[Batch])
}

// Within is the class a request of a key whose class is key gets when it
// asks for asked: a request may lower its key's class, never raise it, so
// asking above the key's class keeps the key's.
func Within(key, asked Class) Class { return max(key, asked) }
