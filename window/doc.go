// Package window decides what of a conversation goes to the backend each
// turn: a bounded prompt, shaped so that the backend's KV cache can reuse
// almost all of it from one turn to the next. The rules it implements (the
// cut, long messages, packets and the reuse allowance, and why each is
// what it is) are in docs/window.md.
package window
