// Package kvcache knows, block by block, which backend and slot holds which
// prompt prefix, so the router can send a turn where its prefix is already
// computed and the engine can reuse it instead of prefilling it again.
//
// # Block keys
//
// A prompt is cut into blocks of B tokens (default 16, as vLLM). A block's key
// is a 64-bit xxhash of (parent key, the block's token ids); the first block's
// parent is a root seeded by the [Namespace] (model id, chat template id,
// adapter id, shift epoch) and by the block size and mode. A key therefore
// names its whole prefix, not just its own tokens: two prompts share the
// first k keys exactly when they share the first k full blocks, and prompts of
// different models, templates, adapters or shift epochs share none. Only full
// blocks get keys; a partial tail is counted in [Chain.Length] but not keyed,
// because a backend cannot be said to hold a block it holds only part of.
//
// For backends that cannot tokenize for kvwin (Ollama) an approximate mode keys
// blocks of bytes of text ([Keyer.Text]). The root differs by mode, so exact and
// approximate keys never match each other, and every [Chain], [Result] and
// [Match] built from text carries Approximate = true so whoever consumes the
// figure (router, cached-token estimate, headers) knows it is an estimate.
//
// # Collision stance
//
// Keys are 64-bit and not cryptographic. With n distinct blocks resident, the
// chance that any two different prefixes share a key is about n²/2^65: for a
// million resident blocks, about 3·10⁻⁸. A collision makes the registry
// believe a location holds a prefix it does not. What that can cost depends on
// who acts on the belief:
//
//   - Routing (Lookup feeding the router): the turn may go to a worse backend
//     or slot. llama-server and Ollama compare the actual tokens of the prompt
//     with the tokens in their slot before reusing anything, so the answer is
//     the one a cold prefill gives; only its speed suffers. Then the backend's
//     reused-token count, passed to [Registry.Correct], removes the wrong belief.
//   - The embedded engine and the snapshot store act on the registry
//     themselves (prefix forking with KvCacheSeqCp, restoring a saved
//     sequence). There the claim "a collision never changes an answer" holds
//     only if they verify token ids, not keys, before they copy or restore KV:
//     the engine must compare the source slot's token ids with the prompt's,
//     and a snapshot must store its token ids (not only its key chain) and be
//     compared on restore. This package cannot do that check for them: it
//     stores keys, 8 bytes per block, not tokens. With that check in place, a
//     collision again costs only a fallback to prefill.
//   - Estimates: where kvwin reports cached tokens from the registry because
//     the backend does not (Ollama), a collision can inflate the figure. It
//     is already marked estimated (X-Kvwin-Cached-Estimated); it is a number
//     in a header, not the answer.
//
// The per-message token cache ([TokenCache]) feeds token ids straight into
// prompts, so a collision there would change an answer. It therefore keys by
// 128 bits (two independent hashes, both checked by ristretto): about n²/2^129.
//
// # One request's life
//
//	chain := keyer.Tokens(promptTokens)        // or keyer.Text(rendered) when approximate
//	res := reg.Lookup(chain)                   // router: longest held prefix per location
//	... the backend serves the turn at loc ...
//	reg.Correct(loc, chain, reportedReused)     // what loc really held when the turn arrived
//	reg.Record(loc, keyer.Tokens(append(promptTokens, generated...)))  // what it holds now
//
// Correct comes before Record: it fixes the registry's belief about the state
// the request found (and counts hits and misses); Record states what the slot
// holds afterwards.
package kvcache
