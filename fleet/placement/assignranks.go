package placement

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Place is one node's standing for one slot as Assign ranks it: its Rank
// and HRWRank there, -1 for both where it is not feasible.
type Place struct{ Rank, HRWRank int }

// AssignRanks is Assign reduced to what a claim needs: per slot it places
// (free slots in 0..count-1), one Place per entry of v.Nodes, in that
// order (a name listed twice: its first entry; the others -1). It gives
// exactly what Assign gives, without the verdicts' reasons and scores.
//
// A unit and view of the common shape (no constraints, affinities,
// spreads, resources, penalties, stickiness, reservations or load; every
// node in the fleet, live, eligible and not draining: what the fleet
// agent ranks) take a path that works on node positions rather than
// names: the ranking of 1,000 nodes for every free slot is what a
// 1,000-node fleet spends its CPU on after a loss. Any other shape is
// ranked by Assign itself.
func AssignRanks(u Unit, free []int, v View, now time.Time) map[int][]Place {
	if !plainShape(u, v, now) {
		return placesOf(Assign(u, free, v, now), v.Nodes)
	}
	p := placement(u)
	var slots []int
	for _, k := range free {
		if k >= 0 && k < p.Count {
			slots = append(slots, k)
		}
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	out := make(map[int][]Place, len(slots))
	if len(slots) == 0 {
		return out
	}

	// The nodes by name (the first entry of a name), as the ranker orders
	// them; pos: each one's entry in v.Nodes.
	names := make([]string, 0, len(v.Nodes))
	pos := make([]int32, 0, len(v.Nodes))
	sorted := true
	for i, n := range v.Nodes {
		if i > 0 && v.Nodes[i-1].Name >= n.Name {
			sorted = false
			break
		}
		names = append(names, n.Name)
		pos = append(pos, int32(i))
	}
	if !sorted {
		names, pos = names[:0], pos[:0]
		seen := make(map[string]bool, len(v.Nodes))
		for i, n := range v.Nodes {
			if !seen[n.Name] {
				seen[n.Name] = true
				names = append(names, n.Name)
				pos = append(pos, int32(i))
			}
		}
		idx := make([]int, len(names))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		n2, p2 := make([]string, len(idx)), make([]int32, len(idx))
		for j, i := range idx {
			n2[j], p2[j] = names[i], pos[i]
		}
		names, pos = n2, p2
	}
	find := func(name string) int {
		i, ok := slices.BinarySearch(names, name)
		if !ok {
			return -1
		}
		return i
	}

	// held: slots of the unit each node holds (the free ones excluded, the
	// matched ones added as they are matched); load: slots matched to it.
	held := make([]int, len(names))
	load := make([]int, len(names))
	maxLoad := 0
	inFree := func(k int) bool { _, ok := slices.BinarySearch(slots, k); return ok }
	for k, h := range v.Holders {
		if h == "" || inFree(k) {
			continue
		}
		if i := find(h); i >= 0 {
			held[i]++
		}
	}

	keys := make([]rankKey, 0, len(names))
	var tmp []rankKey
	var byHRW []rankKey
	for _, k := range slots {
		prefix := hrwPrefix(u.Name, k)
		keys = keys[:0]
		same := true
		for i, name := range names {
			c := held[i]
			if c >= p.MaxPerNode {
				continue
			}
			var aa, ld float64
			if c > 0 {
				if p.Count > 0 {
					aa = clamp(-float64(c+1) / float64(p.Count))
				} else {
					aa = -1
				}
			}
			if l := load[i]; l > 0 && maxLoad > 0 {
				ld = clamp(-float64(l) / float64(maxLoad))
			}
			sum := 0.0
			sum += aa
			sum += ld
			t := math.Round(sum/2*1e9) / 1e9
			if len(keys) > 0 && t != keys[0].total || math.IsNaN(t) {
				same = false
			}
			keys = append(keys, rankKey{total: t, hrw: hrwNode(prefix, name), idx: int32(i), ok: true})
		}
		ps := make([]Place, len(v.Nodes))
		for i := range ps {
			ps[i] = Place{-1, -1}
		}
		out[k] = ps
		if len(keys) == 0 {
			continue
		}
		if same {
			// By HRW alone, ties by position: the HRW order too.
			tmp = sortByHRW(keys, tmp)
			for r, key := range keys {
				ps[pos[key.idx]] = Place{Rank: r, HRWRank: r}
			}
		} else {
			slices.SortFunc(keys, compareKeys)
			byHRW = byHRW[:0]
			for r, key := range keys {
				ps[pos[key.idx]].Rank = r
				byHRW = append(byHRW, key)
			}
			slices.SortFunc(byHRW, func(a, b rankKey) int {
				if a.hrw != b.hrw {
					if a.hrw > b.hrw {
						return -1
					}
					return 1
				}
				return int(a.idx) - int(b.idx)
			})
			for r, key := range byHRW {
				ps[pos[key.idx]].HRWRank = r
			}
		}
		m := keys[0].idx
		held[m]++
		load[m]++
		maxLoad = max(maxLoad, load[m])
	}
	return out
}

// plainShape: u and v take AssignRanks' path by positions.
func plainShape(u Unit, v View, now time.Time) bool {
	p := placement(u)
	if len(p.Constraints) > 0 || len(p.Affinities) > 0 || len(p.Spreads) > 0 || !u.Resources.IsZero() ||
		v.Paused || len(v.Load) > 0 || len(v.Reserved) > 0 || (u.HasVolume && len(v.Previous) > 0) {
		return false
	}
	for _, until := range v.Penalties {
		if until.After(now) {
			return false
		}
	}
	for _, n := range v.Nodes {
		if n.Name == "" || !n.Fleet || !n.Live || n.Draining || !n.Eligible {
			return false
		}
	}
	return true
}

// placesOf reads an Assignment into Places by entry of nodes.
func placesOf(asg Assignment, nodes []NodeInfo) map[int][]Place {
	first := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := first[n.Name]; !dup {
			first[n.Name] = i
		}
	}
	out := make(map[int][]Place, len(asg))
	for k, rs := range asg {
		ps := make([]Place, len(nodes))
		for i := range ps {
			ps[i] = Place{-1, -1}
		}
		for _, r := range rs {
			if i, ok := first[r.Node]; ok && r.Verdict.OK {
				ps[i] = Place{Rank: r.Rank, HRWRank: r.HRWRank}
			}
		}
		out[k] = ps
	}
	return out
}

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hrwPrefix is the FNV-1a state of HRW after "unit\x00slot\x00": the same
// for every node.
func hrwPrefix(unit string, slot int) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(unit); i++ {
		h ^= uint64(unit[i])
		h *= fnvPrime
	}
	h *= fnvPrime // ^= 0
	var b [20]byte
	for _, c := range strconv.AppendInt(b[:0], int64(slot), 10) {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h *= fnvPrime // ^= 0
	return h
}

// hrwNode finishes HRW from hrwPrefix's state.
func hrwNode(h uint64, node string) uint64 {
	for i := 0; i < len(node); i++ {
		h ^= uint64(node[i])
		h *= fnvPrime
	}
	x := h
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
