// Package window decides what of a conversation goes to the backend each
// turn: a bounded prompt, shaped so that the backend's KV cache can reuse
// almost all of it from one turn to the next.
//
// # Layout
//
// A window is, in order: the sinks (the system prompt and the first
// exchange, padded to a block boundary once anything has been evicted), the
// kept history (the most recent messages, verbatim), and the ask. Under the
// memory policy the latest ask carries a packet: turns evicted earlier that
// the ask needs, quoted as data, prepended to the ask's own message (or,
// with Settings.Packets = ledger, each ask since the last eviction step
// keeps its own). Only the end of the window changes from turn to turn.
//
// # The cut rule
//
// The cut is a pure function of (messages, token counts, Settings): Plan
// reads nothing else, so every gateway replica, restarted or not, cuts a
// conversation the same way and counts the same steps. With t(i) the tokens
// of message i, B the budget:
//
//   - Sinks: the leading system messages, plus the first exchange (the first
//     user message and its replies, up to the second user message) if the
//     two together, padded up to a multiple of Block, take at most
//     SinkShare·B. Otherwise only the system messages. S is their padded
//     token count once a step has happened, their plain count before.
//   - Units: the messages after the sinks, split before each user message.
//     Eviction removes whole units from the front, so the kept history
//     always starts with a user message and roles keep alternating.
//   - Replay: the rule is applied as if the conversation had arrived one
//     message at a time. With c the first kept message (initially the end
//     of the sinks) and, for memory, a the number of user messages since the
//     last step, after message i the window holds
//     W = S + t(c..i) + a·P, where P = PacketShare·B is the room reserved for
//     a packet (a = 1 always when packets ride on the latest ask; a counts
//     the user messages since the last step under the ledger). When W > High·B an eviction step happens: c moves
//     forward over whole units, never past the unit holding message i, until
//     W ≤ Low·B (a then counts only message i, if it is a user message). The
//     step count is the number of such steps in the replay.
//   - full: no replay; the whole conversation, or a ContextLengthError if
//     it exceeds B.
//   - sliding: the naive baseline. Only the system messages are pinned (no
//     padding); after each message the oldest units are dropped until the
//     rest fits B, so nearly every turn past the budget is a step and the
//     cached prefix breaks every turn.
//   - sink: the replay with a = 0: between steps the window only grows at
//     its end, so its prefix is byte-identical for many turns, and a step
//     frees (High−Low)·B tokens at once.
//   - memory: the conversation is sent whole while its total stays at most
//     Switch (default B), the seed paper's size rule; the first message that
//     takes it past Switch is its first step, and from then on it is sink
//     plus packets, with P reserved per ask in the replay above.
//
// Every message is checked first: empty or whitespace-only content, invalid
// UTF-8 and unknown roles are ErrInvalidMessage. Under full and sliding a
// single message larger than B is a ContextLengthError, as is a final window
// that cannot fit.
//
// # Long messages (sink and memory)
//
// No old message may block a conversation. A message other than a system
// message longer than M = MessageShare·B (default Low/4 = B/8: the kept
// history a step leaves holds at least four such messages) is long; once a
// step has passed it (a step re-sends the kept history anyway, so this
// costs no reuse) it stands in the window, sinks included, as its excerpt:
// its beginning and end, two to one, about M tokens, around a marker naming
// its handle (excerpt.go). The excerpt is a function of the message alone,
// byte-identical from turn to turn; the memory keeps the message whole. In
// the replay a long message counts M from the step after it; the first
// exchange is pinned if it fits SinkShare·B as it stands once excerpted.
// System messages (an agent's system prompt is its contract) are never
// excerpted. The newest message is always whole: if it, with the sinks and
// the rest of its unit, passes B, the window may take up to the request's
// limit (the context less max_tokens, window.Request.Limit); past that the
// first exchange yields its pin, and only then is the request a
// ContextLengthError naming the newest message.
//
// # Packets
//
// The packet of an ask at message j is built from the turns evicted at the
// current step (positions below c), the window as it stood at j (sinks,
// messages c..j, and under the ledger the packets of earlier asks since
// the step) and the ask's text. Its size follows relevance (see package
// memory: hits within half the best score, their neighbours, nothing when
// the last exchange already matches the ask as well as the memory could),
// bounded by K turns (Settings.K: by default B/4, one for every four
// tokens of the budget, so the tokens bound it and not K, however short
// the turns) and a token room, and it brings only what the
// window does not already hold. A question's packet also takes, best
// first, the turns that match it beyond chance on their own though below
// half the best, and their neighbours, then the weak matches (any shared
// term; memory's step 3), up to the fill room in all
// (memory.Query.FillTokens): B/8, the uniform cap below, at which even a
// packet that filled it every turn would keep reuse near its target, or,
// where the reuse allowance holds the questions at their cap, the
// question's whole room. So the packet grows with what the ask matches
// where the budget has room and never past what reuse allows.
//
// Where it lives (Settings.Packets):
//   - ask (default): only the latest ask carries a packet; the next turn
//     sends that ask again without it and builds a new one for the new
//     ask. Its room is min(cap, B − kept): whatever the budget has left,
//     up to the cap, so the room a step frees is used. The cap follows the
//     ask: questions ask for recall; statements rarely need old turns
//     quoted back. An ask is a question if it holds '?' or '？' or its
//     first word is a wh-word, an auxiliary or a verb of request (what,
//     who, when, where, why, how, which, whose, whom; do, does, did, is,
//     are, was, were, can, could, would, should, will, have, has, had;
//     tell, remind, show, list, describe, explain, summarize, summarise,
//     recall, repeat, please; any case); its cap is PacketCap·B, or more
//     where the reuse allowance has room past it (below), and its best
//     hit may use all the free room past it. A question that finds
//     less free room than the question zone Z (the cap, at most half of
//     H − L) steps the window early (in the replay, so every later turn
//     keeps that step): the room a window leaves swings between P and
//     B − L over its cycle, and without the step a question near the top
//     got P whatever it asked (synth-10k at 2,048: 17 of 100 questions
//     cut by the room; the team's generator at 1,024: 27 points). Any
//     other ask is a statement: its room, best hit included, is what
//     the reuse allowance below leaves it (at most StatementCap·B, often
//     none), and its lexical hits must be beyond chance as the best of
//     all the turns in memory (memory.Query.Statement), so it usually gets
//     nothing, and no more often as the memory grows. The replay
//     reserves P for it.
//   - ledger: every ask since the step keeps its packet, byte for byte,
//     until the next step (a send-once ledger); each ask's room is P plus
//     what earlier asks left unused.
//
// The default was chosen from the recall/cost frontier measured by
// `kvwin bench recall` (recall against cached_share and uncached tokens
// per turn). The ledger pays for its cached packets with room: P is
// reserved for every ask since the step, so windows step more often and
// each packet must be small; per uncached token the packet that rides on
// the ask buys more recall at every reuse level measured.
//
// The caps follow from the reuse target rather than from data. A window at
// 85% reuse may send 15% of itself uncached; windows average about 3/4 of
// B between the water marks, so that is about B/9 per turn, and a packet
// that rides on the ask is uncached on its turn. A uniform cap of B/8 is
// the cap at which even a packet that filled it every turn would stay near
// that target. Sized by the ask, StatementCap = 1/16 is P, the room every
// window already reserves, so a statement's packet costs no room the
// replay did not set aside; PacketCap = 1/4 is then the largest question
// cap at which the mean cap stays at that B/8 while up to one ask in three
// is a question: q·B/4 + (1−q)·B/16 ≤ B/8 for q ≤ 1/3. A conversation of
// nothing but questions may spend up to B/4 a turn.
//
// # The reuse allowance
//
// The B/8 above counts only the packet. A turn pays more than that
// uncached, and the rooms past the caps follow from the whole account, in
// tokens per turn, of the conversation's own messages (so every replica
// computes the same): with a the mean user message and g the mean unit
// (a user message and its replies) after the sinks, L = Low·B, H = High·B,
// S the padded sinks,
//
//   - every turn sends its ask uncached: a;
//   - a step re-sends the kept history after the sinks, L − S, once every
//     D/g turns: σ = g·(L − S)/D a turn, about one unit at Low = 1/2
//     whatever B, where D is what the window grows by between steps:
//     H − P − L, or, once questions step early, H − Z − L + g/q (in the
//     zone one ask in 1/q is a question, q below), the smaller;
//   - a packet of p tokens is uncached on its turn, and on the next its ask
//     and the answer are sent again without it: p + g;
//   - at ReuseTarget R the mean window W̄ = (L + H − P)/2 may send
//     (1 − R)·W̄ uncached, so packets may spend A = (1 − R)·W̄ − a − σ.
//
// q is the conversation's own share of questions: of its latest 256 user
// messages after the sinks, those isQuestion takes for one, with one in
// three (the caps' assumption above) as a prior worth three asks:
// q = (questions + 1)/(asks + 3). A conversation shows within a few tens
// of asks how often it asks, and what its questions may spend follows
// from that: a chat of short statements, where a thought is sent a
// sentence at a time, asks far less often than one ask in three (the
// texting restyle of LoCoMo dev: 7–14% of its user messages), a
// conversation of questions more often.
//
// Questions at the question cap spend q·(PacketCap·B + g) of A. Questions
// come first: they are what asks for recall. Where A holds them at the
// cap, their cap grows with the rest of it, to A/q − g, at most B − L
// (the free room a step leaves), and their fill may take all of it;
// where it does not, they keep the cap and the fill its B/8. A
// statement's packet may take what the questions leave, spread over the
// other asks and less the g each costs again: (A − q·(Q + g))/(1 − q) − g
// for the questions' cap Q, at most StatementCap·B, none if that is not
// positive: with one ask in three a question and the default water marks
// the questions take all of A, and a statement gets a packet only where
// the cap reaches B − L with spare left (few questions, or Low past
// 1 − PacketCap). The statements' room once came first; the questions'
// recall that moving it to them buys (docs/recall-sets.md, the texting
// restyle at 12,288: 74.4% → 77.5%) is measured, a statement's is not.
//
// Where a + σ + q·(PacketCap·B + g) exceeds (1 − R)·W̄ (small budgets
// against long turns: at 1,024 tokens with 34-token turns a + σ alone
// take most of the 15%, and a packet's re-sent ask and answer cost g more),
// no question packet that holds a turn fits the target: the window keeps
// the question's packet and its reuse falls below R there rather than its
// recall (docs/recall-sets.md reports that frontier).
//
// Replica safety: a packet is a function of messages[0..j] and the evicted
// turns below c, nothing else (retrieval scores use the conversation's own
// statistics, never another conversation's), so a replica that has not seen
// the earlier requests rebuilds the same earlier packets. A replica keeps
// the packets it has built in a bounded memo keyed by a hash of exactly
// those inputs, so the rebuild costs one retrieval per ask at most once.
// For named conversations the evicted turns come from the durable store,
// which returns only the turns of the request's own history (a rewritten
// history is a branch of its own, see package memory); if the store is down
// and the request's own turns are used instead, packets may differ from
// those sent before, which costs cache reuse, never correctness.
package window
