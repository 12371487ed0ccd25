// Package attention is kvwin's cost model of attention: what a model's KV
// cache costs in memory, what a prefill costs in compute, and how long a
// given backend takes to prefill P new tokens after C tokens it already
// holds, in three layers (Cost, Calibration, Plan). The prefill formula and
// why its two terms are fitted apart are in docs/attention.md.
package attention
