// Package router sends each turn to the backend where its first token will
// come soonest: usually the backend (and slot) already holding its prefix,
// never all turns onto one box. Its stages (filter, estimate, score,
// attempt), the predicted-TTFT score, slot placement, retries and
// failures, and why each is what it is, are in docs/routing.md.
package router
