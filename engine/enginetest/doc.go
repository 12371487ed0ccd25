// Package enginetest holds what tests need around engine.Backend: Backend,
// one scripted fake that records its calls (scripted events, errors before
// or after the first event, blocking until cancelled, panics); ability
// types that give a fake exactly the optional abilities a test wants
// (abilities.go); and Run, the conformance suite every adapter and the
// router pass (streaming order, cancellation, errors, timings, abilities).
package enginetest
