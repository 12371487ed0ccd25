// Package ttft is kvwin's TTFT-versus-conversation-length harness: it
// replays one long conversation against an OpenAI-compatible server turn by
// turn, once per window policy, and measures how the time to first token
// grows with the conversation.
//
// The pieces, one per file:
//
//   - Conversation: a system prompt and user/assistant turns. Workloads come
//     from the built-in deterministic generator (Generate), a LoCoMo-format
//     file (LoadLoCoMo) or a ShareGPT-format file (LoadShareGPT).
//   - Runner: replays a conversation against a base URL under one Policy,
//     as clients do: every request carries the whole history so far, with
//     the workload's own assistant messages (not the model's output), so
//     every policy is measured on byte-identical histories.
//   - Summarize: per policy, the eviction steps, the plateau ratio, the
//     cached share and the attention.Fit of the prefill times.
//   - Report: the results as ttft.csv, ttft.json and ttft.svg, and the
//     summary table printed to standard error.
//   - Bench: kvwin bench ttft itself, a fresh in-process server per policy
//     (or one --target) and the files.
//
// Measurements are reported, never asserted: the machines that run them
// are shared and noisy, so policies are compared within one run.
package ttft
