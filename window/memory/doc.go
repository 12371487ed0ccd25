// Package memory holds the turns a window has evicted and finds the ones an
// ask needs: a store per named conversation (SQLite or PostgreSQL), an
// in-memory index per branch, and the retrieval that builds a packet. The
// rules (retrieval steps, passages, supersession, branches) and why they
// are what they are are in docs/memory.md.
package memory
