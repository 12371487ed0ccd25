// Package memory holds the turns a window has evicted and finds the ones an
// ask needs.
//
// Two memories share one retrieval. Store keeps the evicted turns of named
// conversations, keyed by (tenant, conversation), in an embedded SQLite file
// (WAL, synchronous=FULL), each turn filed under the chain of the history
// that said it (Link), so a request only ever gets back turns of its own
// history: a diverging history is a branch of its own. Searches run over an
// in-memory Index per branch, loaded from the file on first use. Index keeps
// a set of turns in memory, for unnamed conversations (whose packet may come
// only from their own request) and offline evaluation. Given the same turns,
// both return the same hits with the same scores (a test holds them to it).
//
// Retrieval for an ask, best first:
//
//  1. Facts. The fact analysis (facts.go) learns from the conversation
//     itself which turns state an attribute of a named thing ("Omar moved to
//     Lisbon", "Org change: Omar became release manager") and groups the
//     frames those statements use into attributes by the values they share.
//     It uses no word list beyond English function words: names are words
//     never written in lower case, attributes are frames that recur with
//     different values. The current statements about every name the ask
//     mentions come first: a question paraphrases its answer ("Which
//     companion would greet me at Omar's place?" against "Omar rehomed the
//     old pet and took in a tortoise") but keeps the name.
//  2. BM25 over the ask's words, with the conversation's own statistics.
//  3. Supersession: a turn whose every fact was replaced by a later fact
//     about the same subject and attribute (among the candidates or in the
//     window) is left out, so an update does not bring back what it
//     replaced.
//  4. Novelty: turns the window holds, and texts it already holds, are left
//     out; of several copies of one text only the best-ranked is kept.
//
// Hits are bounded by K and by a token budget with a per-hit cost given by
// the caller. The fact analysis works where a conversation repeats its
// phrasings (most do, for the facts that matter: "X moved to", "X is our");
// where it finds no frames, retrieval is BM25 plus names. It cannot tell a
// state from an event: "I visited Oslo" after "I visited Rome" counts as a
// replacement.
package memory
