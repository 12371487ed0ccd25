package peers

import (
	"kvwin/engine"
	"kvwin/router"
)

// dynamo is NVIDIA Dynamo's KV router (ai-dynamo/dynamo, docs/router and
// docs/design_docs/router_design.md) with its defaults
// --kv-overlap-score-weight 1 and --router-temperature 0 (the lowest cost
// wins; ties at random, here reproducibly by tieOrder). A worker's cost is
//
//	overlap_weight × potential prefill blocks + potential decode blocks
//
// where the prefill blocks are the prompt's tokens the worker does not hold
// (input − overlap blocks × block size) plus those of its turns still in
// prefill, over the block size, and the decode blocks are the blocks of its
// active turns plus the prompt's. The overlap is what the worker's KV
// events say it holds (Dynamo's KvIndexer): here the registry's match,
// which the router keeps from what each backend reports. Active blocks are
// counted at the prompt's length (their growth while generating is not
// followed).
//
// Lower tiers (a kvwin node's snapshots, bench fleet --tiers): with KVBM
// (docs.nvidia.com/dynamo, "KVBM design": G1 device, G2 host, G3 disk
// pools) the workers' KV events carry blocks offloaded to host memory,
// and the KV router's indexer counts them in the overlap as it counts
// device blocks (Dynamo's "Native KV Offloading" guide: CPU-tier blocks
// routed to after GPU eviction; its disk tier mapping is marked in
// progress). So here the overlap is the registry's match when a slot or
// a RAM snapshot holds it, and only what a slot holds when the best hold
// is a disk snapshot.
type dynamo struct {
	overlapWeight float64
	active        activeSet
}

func newDynamo() *dynamo { return &dynamo{overlapWeight: 1} }

func (d *dynamo) Rank(cands []router.Candidate, p router.Prompt) []router.Candidate {
	cost := make(map[string]float64, len(cands))
	newTokens := make(map[string]int, len(cands))
	block := float64(p.BlockTokens)
	for _, c := range cands {
		held := c.Matched
		if c.MatchedTier == "disk" {
			held = c.MatchedSlot // G3: not in Dynamo's index
		}
		overlap := held / p.BlockTokens * p.BlockTokens
		n := max(p.Length-overlap, 0)
		ld := d.active.load(c.Name)
		newTokens[c.Name] = n
		cost[c.Name] = d.overlapWeight*float64(ld.prefill+n)/block + float64(ld.tokens+p.Length)/block
	}
	out := cheapestFirst(cands, p, func(c router.Candidate) float64 { return cost[c.Name] })
	if len(out) > 0 {
		d.active.add(p.ID, out[0].Name, p.Length, newTokens[out[0].Name])
	}
	return out
}

func (d *dynamo) Watch(p router.Prompt, stream engine.StreamFunc) engine.StreamFunc {
	return d.active.watch(p, stream)
}

func (d *dynamo) Ended(p router.Prompt) { d.active.remove(p.ID) }
