package memory

import "sort"

// minSharedValues is how many values two slots must share to be read as one
// attribute. One shared value is too weak: "Wednesday" is both a ship day and
// a day off.
const minSharedValues = 2

// maxClustersPerValue: a value said in more clusters than this is too
// common to tell attributes apart and is ignored for joining.
const maxClustersPerValue = 32

// clusterFrames groups slot frames into attributes and returns frame →
// cluster id. Clusters that between them share at least minSharedValues
// values are joined, until no two do: "S moved to _ last spring" said of
// Osaka and "S lives in _ now" said of Tbilisi join "update on S: family
// settled in _" said of both, even if no single pair of frames shares two.
// A frame said with one value only (two projects that both "slipped; new
// ship day is Wednesday") joins the one cluster that holds its value, if it
// was said of two or more subjects and exactly one cluster qualifies. The
// partition does not depend on map order; cluster ids are labels only.
func clusterFrames(frames map[uint64]*frameStat) map[uint64]int {
	var slots []uint64
	for id, fs := range frames {
		if fs.isSlot() {
			slots = append(slots, id)
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })

	parent := make([]int, len(slots))
	values := make([]map[uint64]struct{}, len(slots)) // per root
	for i, id := range slots {
		parent[i] = i
		values[i] = map[uint64]struct{}{}
		for v := range frames[id].values {
			values[i][v] = struct{}{}
		}
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for merged := true; merged; {
		merged = false
		byValue := map[uint64][]int{}
		for i := range slots {
			if find(i) == i {
				for v := range values[i] {
					byValue[v] = append(byValue[v], i)
				}
			}
		}
		shared := map[[2]int]int{}
		for _, roots := range byValue {
			if len(roots) > maxClustersPerValue {
				continue // a value everything says links nothing
			}
			for a := 0; a < len(roots); a++ {
				for b := a + 1; b < len(roots); b++ {
					shared[[2]int{roots[a], roots[b]}]++
				}
			}
		}
		var pairs [][2]int
		for p, n := range shared {
			if n >= minSharedValues {
				pairs = append(pairs, p)
			}
		}
		sort.Slice(pairs, func(i, j int) bool {
			if pairs[i][0] != pairs[j][0] {
				return pairs[i][0] < pairs[j][0]
			}
			return pairs[i][1] < pairs[j][1]
		})
		for _, p := range pairs {
			a, b := find(p[0]), find(p[1])
			if a == b {
				continue
			}
			parent[a] = b
			for v := range values[a] {
				values[b][v] = struct{}{}
			}
			values[a] = nil
			merged = true
		}
	}

	out := make(map[uint64]int, len(slots))
	owners := map[uint64]map[int]bool{} // value → clusters saying it
	for i, id := range slots {
		c := find(i)
		out[id] = c
		for v := range frames[id].values {
			if owners[v] == nil {
				owners[v] = map[int]bool{}
			}
			owners[v][c] = true
		}
	}
	for id, fs := range frames {
		if fs.valueCount != 1 || fs.subjects < 2 {
			continue
		}
		for v := range fs.values {
			if len(owners[v]) == 1 {
				for c := range owners[v] {
					out[id] = c
				}
			}
		}
	}
	return out
}
