// Package attention is kvwin's cost model of attention: what a model's KV
// cache costs in memory, what a prefill costs in compute, and how long a
// given backend takes to prefill P new tokens after C tokens it already
// holds.
//
// Three layers, each usable alone:
//
//   - Cost: physics from a model's shape (gguf.Shape). KV bytes per token,
//     weight bytes, prefill FLOPs, decode bytes per token, and the prompt
//     length at which attention starts to dominate prefill.
//   - Calibration: the same shape of formula, t ≈ c₀ + a·P + b·P·(C + P/2),
//     fitted online to one backend's observed prefill times. The router
//     calls Calibration.Predict for every candidate on every request.
//   - Plan: how many tokens of KV fit per slot in a given VRAM, and prefill
//     FLOPs at typical lengths, for `kvwin gguf inspect --vram --slots`.
//
// The prefill cost model. For P new tokens after C cached ones:
//
//	FLOPs ≈ 2·params·P  +  4·layers·d·P·(C + P/2)
//
// The first term is every weight used once per token as a multiply-add
// (2 FLOPs). The second is attention: per layer, QKᵀ and AV are each a
// multiply-add over head_dim for every (query, key) pair and every query
// head, i.e. 2·d FLOPs per pair with d = heads·head_dim; causal masking
// gives the i-th new token C + i keys, P·(C + P/2) pairs on average. Two
// matrix products × 2·d per pair = 4·d per pair per layer. (Grouped-query
// attention shares K/V heads but every query head still does its own dot
// products, so d counts query heads.) With C = 0 the terms are equal at
// P = params / (layers·d): the crossover.
//
// Real backends do not reach the same efficiency on both terms (on a CPU
// without flash attention the attention term runs several times below the
// matrix-multiply rate, and a batch of k rows is computed against every
// cached cell, masked or not), which is why the time model keeps the two
// terms' coefficients apart and fits them per backend instead of dividing
// FLOPs by one rate.
package attention
