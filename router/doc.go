// Package router sends each turn to the backend where its first token will
// come soonest: usually the backend (and slot) already holding its prefix,
// never all turns onto one box.
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
// is the candidate's requests beyond its slots times its recent mean service
// time. The lowest prediction wins.
//
// A hot-spot guard keeps one box from taking everything: when the most and
// least loaded candidates differ by more than BalanceAbs requests and by more
// than BalanceRel times, the least loaded wins whatever the prediction
// (SGLang's rule). Predictions within TieTolerance of the best are ties,
// broken by rendezvous hashing of the conversation's root key (its first
// block) with the backend's name, so replicas of the gateway agree without
// talking to each other.
//
// When the registry knows the slot holding the prefix, the request is
// pinned to it (llama-server's id_slot).
//
// Other policies, for comparison: round-robin, least-loaded, random.
//
// # Failures
//
// Backends are checked actively (GET /health or the adapter's Health) with
// exponential backoff while down. A backend that fails before the first
// byte of an answer is marked down and the next candidate is tried; after
// the first byte the error is returned, and the HTTP layer ends the stream
// with an error event. No healthy backend: engine.ErrUnavailable (503).
package router
