// Package kvcache knows, block by block, which backend and slot holds which
// prompt prefix, so the router can send a turn where its prefix is already
// computed and the engine can reuse it instead of prefilling it again. Block
// keys, residency, approximate (text) keys and eviction are explained in
// docs/registry.md.
package kvcache
