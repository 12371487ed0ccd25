package memory

import (
	"slices"
	"sort"
)

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
//
// A general frame joins nothing: one whose values are several attributes'
// ("S recommended _ to a colleague" said of instruments, sports and cars;
// see generalFrames). It is no slot, so its statements state no attribute
// through it; clusterFrames returns the general frames too.
func clusterFrames(frames map[uint64]*frameStat) (map[uint64]int, map[uint64]bool) {
	var slots []uint64
	for id, fs := range frames {
		if fs.isSlot() {
			slots = append(slots, id)
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	general := generalFrames(frames, slots)
	slots = slices.DeleteFunc(slots, func(id uint64) bool { return general[id] })

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
	return out, general
}

// generalFrames returns the slots whose values are those of several
// attributes. Two slots are linked when they share minSharedValues values.
// Among the slots linked to F, leave out, until none is left, those
// linked to most of the others still in: they link anything (other
// general frames, or F's own attribute's frames). If what is left falls
// into two or more groups of two or more linked slots each, F links
// attributes that nothing else links: it is general. "S plays the _ in
// the band" and "S practises _ every weekend" are one group, "S trains
// for _" and "S signed up for the _ league" another, and "S recommended _
// to a colleague", said of both groups' values, is general; "S settled in
// _", said of one city of "S moved to _" and one of "S lives in _", links
// two single slots and joins them.
func generalFrames(frames map[uint64]*frameStat, slots []uint64) map[uint64]bool {
	byValue := map[uint64][]int{}
	for i, id := range slots {
		for v := range frames[id].values {
			byValue[v] = append(byValue[v], i)
		}
	}
	linked := func(a, b int) bool {
		va, vb := frames[slots[a]].values, frames[slots[b]].values
		if len(va) > len(vb) {
			va, vb = vb, va
		}
		n := 0
		for v := range va {
			if _, ok := vb[v]; ok {
				if n++; n >= minSharedValues {
					return true
				}
			}
		}
		return false
	}
	out := map[uint64]bool{}
	for i, id := range slots {
		shared := map[int]int{}
		for v := range frames[id].values {
			if len(byValue[v]) > maxClustersPerValue {
				continue // as for joining: a value everything says links nothing
			}
			for _, j := range byValue[v] {
				if j != i {
					shared[j]++
				}
			}
		}
		var near []int
		for j, n := range shared {
			if n >= minSharedValues {
				near = append(near, j)
			}
		}
		if len(near) < 4 { // two groups of two
			continue
		}
		sort.Ints(near)
		adj := make([][]bool, len(near))
		for a := range near {
			adj[a] = make([]bool, len(near))
		}
		for a := range near {
			for b := a + 1; b < len(near); b++ {
				if linked(near[a], near[b]) {
					adj[a][b], adj[b][a] = true, true
				}
			}
		}
		groups := separateGroups(adj)
		if groups >= 2 {
			out[id] = true
		}
	}
	return out
}

// separateGroups counts the groups of two or more linked slots among those
// adj links once the slots linked to most of the others still in are left
// out, until none is left (see generalFrames).
func separateGroups(adj [][]bool) int {
	n := len(adj)
	keep := make([]bool, n)
	for a := range keep {
		keep[a] = true
	}
	for in := n; ; {
		var drop []int
		for a := range n {
			if !keep[a] {
				continue
			}
			links := 0
			for b := range n {
				if keep[b] && adj[a][b] {
					links++
				}
			}
			if 2*links > in-1 {
				drop = append(drop, a)
			}
		}
		if len(drop) == 0 {
			break
		}
		for _, a := range drop {
			keep[a] = false
		}
		in -= len(drop)
	}
	groups, seen := 0, make([]bool, n)
	for a := range n {
		if !keep[a] || seen[a] {
			continue
		}
		size, stack := 0, []int{a}
		seen[a] = true
		for len(stack) > 0 {
			c := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			size++
			for b := range n {
				if keep[b] && !seen[b] && adj[c][b] {
					seen[b] = true
					stack = append(stack, b)
				}
			}
		}
		if size >= 2 {
			groups++
		}
	}
	return groups
}

// attributes returns the attribute each clustered value belongs to: the
// cluster more of whose frames say it ("S keeps reading _ on the train",
// "S borrowed _ from the library" and "S's sister is reading _" say a
// chess manual; "these days it's _ for S", joined to the instruments' by
// the cello and the harp, says it once), or -1 where two clusters tie.
func attributes(frames map[uint64]*frameStat, cluster map[uint64]int) map[uint64]int {
	count := map[uint64]map[int]int{}
	for fr, c := range cluster {
		for v := range frames[fr].values {
			if count[v] == nil {
				count[v] = map[int]int{}
			}
			count[v][c]++
		}
	}
	out := make(map[uint64]int, len(count))
	for v, by := range count {
		best, n, tie := -1, 0, false
		for c, k := range by {
			switch {
			case k > n:
				best, n, tie = c, k, false
			case k == n:
				tie = true
			}
		}
		if tie {
			best = -1
		}
		out[v] = best
	}
	return out
}
