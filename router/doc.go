// Package router sends each turn to the backend where its first token will
// come soonest: usually the backend (and slot) already holding its prefix,
// never all turns onto one box.
//
// # Structure
//
// A turn passes four stages, each in its own file:
//
//   - filter (filter.go): named filters keep the backends it may go to:
//     healthy (else, with none, those down for a reason that fails fast),
//     serving the model, with slots that fit the prompt.
//   - estimate (estimate.go): for each, what the registry says it holds
//     of the prompt and its predicted time to first token, the slot plan
//     included (placement.go); the same for every policy.
//   - score (policy.go): the policy's scorer ranks the candidates, best
//     first, and says which slot each would run the turn on: "prefix" is
//     the predicted-TTFT score below; round-robin, least-loaded and random
//     rank by their rule and leave the slot to the backend. A scorer
//     reads no clock; the router's (Config.Now) is read by the estimate.
//   - attempt (attempt.go): the turn is tried on the ranked candidates in
//     order. place decides the one slot it runs on (the client's pin, the
//     tenant pin of tenancy.go, or the scorer's); classify decides, for a
//     failure, whether the next candidate is tried and whether the backend
//     leaves the fleet (see Failures). Every cached-token count a turn
//     reports passes through one usage (usage.go): checked, learned by the
//     registry, capped for the tenant.
//
// # Scoring (policy "prefix")
//
// For every healthy candidate serving the model, the router predicts the
// time to first token:
//
//	predicted = queue wait + prefill(new tokens, cached tokens)
//
// where cached tokens are what the prefix registry says the candidate holds
// of this prompt (its best slot, or its snapshot tier), new tokens are the
// rest, prefill is the candidate's own calibrated cost model
// (attention.Calibration, fitted from the timings it reports) and queue wait
// is the longer of the candidate's requests beyond its slots times its
// recent mean service time, and the predicted prefills the router sent it
// that have not reached their first token (a backend's prefills share its
// compute, whatever slots are idle; bench fleet, 64 × 4 nodes at load 1.0:
// TTFT p90 849 against 964 ms on llama-server nodes, 876 against 1,136 on
// kvwin nodes, with less prefill). The lowest prediction wins.
//
// A hot-spot guard keeps one box from taking everything: when the most and
// least loaded candidates differ by more than BalanceAbs requests and by more
// than BalanceRel times, the least loaded wins whatever the prediction
// (SGLang's rule). Predictions within TieTolerance of the best are ties,
// unless one destroys or computes more than another by more than
// TieTokens' worth (a cost, not noise: the tie would trade a queue that
// clears for work the fleet does); ties are broken by rendezvous hashing
// of the conversation's root key (its first block) with the backend's
// name, so replicas of the gateway agree without talking to each other.
//
// When the registry knows the slot holding most of the prompt, the request
// is pinned to it (id_slot).
//
// # Slots: planned by the router
//
// A llama-server's request overwrites whatever its slot held past the
// common prefix. The router plans the slot (placement.go): a slot's cost is what
// the turn computes there plus what it destroys, a slot holding another
// conversation's chain being worth that chain to it: all of it while some
// slot of the fleet is free, twice its evicted suffix once none is. So a
// new conversation takes a free slot rather than a sibling's that shares
// its system prompt, and every turn there is pinned to the planned slot
// (llama-server's own choice would be the sibling's: the slot sharing the
// longest prefix, --slot-prompt-similarity). Once the router has watched
// enough turns, a chain's worth is weighed by the chance it is continued,
// given how long it has been idle and, while some slot is free, how many
// turns it has had (liveness.go): a slot whose conversation has most
// likely ended is nearly free. A turn that is a branch of a slot's chain
// (a retry, a regenerate, an edit of the last message) destroys only the
// tail it overwrites there, weighed alike. A backend found restoring
// what its slots gave up (a turn reusing more than its slot held:
// llama-server's --cache-ram) has those chains counted as held there, as a
// kvwin node's snapshots are, on the server's terms: only a slot keeping
// less than half of what it holds is swapped with the cache, and a load
// takes the prompt out of it (placement.go). A kvwin node, which copies a prefix one slot
// holds into another (engine.Info.SharesPrefixes), is planned the same
// way, every slot reusing the longest prefix the node holds anywhere: its
// own choice, the least recently used idle slot, knows nothing of which
// conversations will come back. Until liveness weighs chains the node
// chooses, but a kvwin node without snapshots is planned while a slot of
// one is empty, so a newcomer takes that slot rather than a thinking
// conversation's (placement.go, plansEarly).
//
// With Config.IsolateTenants (a gateway with keys), every turn on a backend
// that does not keep tenants apart but runs a request on the slot it names
// (llama-server, a kvwin node without the gateway's key) is pinned, and may
// reuse the slot's KV only if the router knows its own tenant computed it;
// else it is sent with cache_prompt false (tenancy.go). Ollama cannot be
// pinned and is left as it is.
//
// Other policies, for comparison: round-robin, least-loaded, random, and
// the peers' (peers.go): llm-d's default profile and its "sticky until
// saturated" (sticky.go), SGLang's and Dynamo's, each from its published
// description with its published defaults.
//
// # Failures
//
// Backends are checked actively (GET /health or the adapter's Health) with
// exponential backoff while down; each check that passes re-reads the
// backend's slots and context (llama-server's /props), so a node restarted
// with fewer slots is planned for as it is, and a node that rejoins after
// being down is taken to hold nothing. A backend that fails before the
// first byte of an answer is marked down and the next candidate is tried;
// after the first byte the error is returned, and the HTTP layer ends the
// stream with an error event. With no healthy backend, the backends that
// are down for a reason that fails fast are tried anyway (a restarted node
// serves before the next check); when none serves: engine.ErrUnavailable
// (503). A busy backend (its queue full) stays in the fleet.
//
// A backend that does not connect or send its first token in time (the
// adapters' timeouts; engine.ErrTimeout) has cost the client the whole
// wait, so the turn is retried once, on the next candidate that can take
// it, under every policy; a second timeout, or no other candidate, gives
// engine.ErrTimeout (504). The backend is then distrusted: answering
// /health is not enough, it is back only once a probe generation of one
// token succeeds.
//
// A slot pin the backend refuses (a slot it no longer has) is the router's
// mistake: the backend's slots are re-read, the pin dropped and the turn
// run unpinned. So is a prompt refused as too long by a backend the router
// believed could hold it (its context shrank): the backend is re-read and
// the next candidate tried; only when none holds the prompt does the client
// get the context-length error. Usage a backend reports is checked against the prompt the
// router sent (usage.go); a count that cannot be true is logged and
// replaced by the router's own. The errors the router returns tell a
// client what kind of failure it was, never a backend's URL or words,
// which are in the error's text for the log (public.go).
//
// # Slot state
//
// Residency is learned from what the router sent and corrected by the
// reuse each backend reports; where a backend can say what its slots hold
// (llama-server's /slots), the router also reads it at join, when a turn
// reuses less than the registry believed, and every SlotsInterval, and
// makes the registry agree (slots.go).
package router
