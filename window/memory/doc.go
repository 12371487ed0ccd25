// Package memory holds the turns a window has evicted and finds the ones an
// ask needs.
//
// Two memories share one retrieval. Store keeps the evicted turns of named
// conversations, keyed by (tenant, conversation), in an embedded SQLite file
// (WAL, synchronous=FULL) or a PostgreSQL database several gateway replicas
// share (dialect.go), each turn filed under the chain of the history
// that said it (Link), so a request only ever gets back turns of its own
// history: a diverging history is a branch of its own. Searches run over an
// in-memory Index per branch, loaded from the file on first use. Index keeps
// a set of turns in memory, for unnamed conversations (whose packet may come
// only from their own request) and offline evaluation. Given the same turns,
// both return the same hits with the same scores (a test holds them to it).
//
// Retrieval for an ask (search.go, score.go) is plain information
// retrieval over the history's own turns, each step with a rule rather
// than a fitted constant:
//
//  1. BM25 (k1 1.2, b 0.75) over Snowball-stemmed content words, with the
//     statistics of the searched turns only. The names of the two parties,
//     learned from how each addresses the other ("Thanks, Caroline!" said
//     by the assistant names the user), count as a term of every turn that
//     party said.
//  2. Facts. The fact analysis (facts.go) learns from the conversation
//     itself which turns state an attribute of a named thing ("Omar moved
//     to Lisbon") and groups the frames those statements use into
//     attributes by the values they share; names are words never written in
//     lower case, and a name set off as a vocative ("That's great, Omar!")
//     is not a subject. The statements about a name the ask mentions rank
//     like the best turn that names it: a question paraphrases its answer
//     but keeps the name. They count when that turn scores within half of
//     the best match that is not a statement about someone else: another
//     person's statement in the ask's words is no answer about this one.
//  3. Size by relevance. An ask gets lexical hits only if some turn
//     matches it beyond chance: the ask terms the turn holds are, together,
//     rarer (were terms scattered independently) than the conversation's
//     average word, divided by the number of the ask's terms the history
//     holds (a Bonferroni allowance). A term's share counts the ask as one
//     more turn that holds it (df+1 of n+1): the ask's terms are picked
//     because the ask says them. An ask of words as common as any, as in a
//     conversation of few words said over and over, matches every turn
//     alike and gets nothing. A statement (Query.Statement: the window sets
//     it for an ask that is no question or request) says no old turn is needed, so its match
//     must also be beyond chance as the best of all n turns searched: the
//     union bound over the n turns and the 2^m - 1 combinations of its m
//     terms, n(2^m-1) times the match's share, is below one (fewer than
//     one chance match expected). Its chance packets then shrink as the
//     memory grows instead of growing with it; one word said once is never
//     enough for a statement. Then hits within half of the best score and,
//     for a question (which asks for recall), every turn that matches it
//     beyond chance on its own, best first, as far as the room goes: the
//     room, set by the reuse target, bounds a question's packet, and
//     relevance orders it. Then the turns up to two speaker turns from each
//     hit, k turns away at 1/2^max(k,1) of its score, where a speaker's
//     turn is the run of messages they send before the other answers (in
//     a written conversation one message; in chat, a thought sent a
//     sentence at a time, so the rest of the hit's own run counts as its
//     next neighbours do); in a conversation of two, the turn two away is
//     the same speaker's next or previous turn. Past the next message,
//     neighbours are a question's fill; at most 16 messages are walked on
//     each side. Last, for a question, the weak matches: what the fill's
//     room (Query.FillTokens) still holds goes, best first, to the turns
//     that share any term with it without passing the chance test, and
//     their neighbours, after every other hit. Short messages (one
//     sentence of chat) pass the test less often than the paragraphs it
//     was set on, though they hold answers as often; a weak match is
//     never taken as an update (step 4). If the last exchange in
//     the window already matches the ask as well as the best turn in
//     memory, the ask continues the conversation and gets only the fact
//     statements.
//  4. Supersession: a turn whose every fact is replaced by a later fact
//     about the same subject and attribute, stated by a turn the search
//     also found or by the window, is left out. A fact is replaced by
//     what a later turn does to the subject's attribute, not by its
//     verbs: a later turn the ask's search also found, other than as a
//     weak match (or the window holds), that names the same subject (for the asker, that the asker
//     said), states something (not only questions), and names the value
//     the earlier fact gave the attribute is the conversation's later
//     word on it, in whatever words or sentences ("Remember when I said
//     Omar's instrument was the banjo? Scratch that, the harp."), or a
//     restatement, which carries the same value; the conversation's
//     order is the evidence of which is current (supersede.go, updated).
//     The frame analysis (below) reads the facts later turns state in a
//     known frame. Either way an update does not bring back what it
//     replaced, and nothing is dropped in favour of a
//     statement the window will not carry. Facts about named subjects the
//     ask does not name do not keep a turn ("Daniel is on call. Also, Sofia
//     has rabbits." is stale for an ask about Daniel once his role changed).
//     A later statement about the same subject and attribute supersedes
//     the earlier one without naming the old value when it says the value
//     holds now or changed (a word of change or of the present: "switched",
//     "instead", "no longer", "now", "these days", "new") and names one
//     value of that attribute alone, in whatever frame ("Small change: Ines
//     has switched and now drinks mint tea instead."); a value's attribute
//     is the cluster whose frames say it most (facts.claims). Only what a
//     sentence asserts of its subject counts: not a hedge ("might", "is
//     thinking about"), a clause of a reported question or of someone else
//     ("whether", "if", "who"), a relation of the subject ("Ines's sister"),
//     or a value a turn names only in a frame said of several attributes'
//     values ("S recommended _ to a colleague": a general frame, which joins
//     no attributes either) or in a question that does not name the
//     subject. "He" or "she" is the named subject of the sentence before.
//  5. Novelty: turns the window holds, and texts it already holds, are left
//     out; of several copies of one text only the best-ranked is kept.
//
// Hits are bounded by K and by a token budget with a per-hit cost given by
// the caller. A long turn (over two passages of 512 bytes: an assistant's
// answer, a paste) is a hit by its passage that matches the ask best, with
// Turn.Part naming it; what it costs is that passage (passage.go states the
// splitting rule), so one long turn that scores first no longer fills a
// packet the ask sized. The fact analysis works where a conversation repeats its
// phrasings. An update that names the old and the new value in one
// sentence ("swapped the banjo for the cello") repeats no frame; it is read
// as a change when it names a named subject's current value of an
// attribute and one other value the conversation gives that attribute
// (facts.changes), not when a speaker talks of themselves. When the new
// value is one the conversation states nowhere else ("gave up the banjo;
// it's the harp now"), the sentence is a change only if it says that the
// old value stopped holding: a negator, a contrast or a verb of
// substitution or cessation (facts.changeMarked, a closed list of English
// function words and change-of-state verbs). The analysis
// cannot tell a state from an event: "I visited Oslo" after "I visited
// Rome" counts as a replacement.
package memory
