package cluster

import (
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// HRW is the rendezvous hash of (unit, slot, node): 64-bit FNV-1a over
// "unit\x00slot\x00node" (slot in decimal), then the splitmix64 finaliser,
// since FNV alone leaves the high bits of near-equal node names close. The
// same on every process and architecture.
func HRW(unit string, slot int, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(unit))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(slot)))
	h.Write([]byte{0})
	h.Write([]byte(node))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Ranked is one node's place for one slot.
type Ranked struct {
	Node    string
	Verdict Verdict
	// Score is zero for an infeasible node.
	Score Score
	// Rank orders the feasible nodes by (Score.Total desc, HRW desc, name):
	// 0 is the best. -1 for an infeasible node.
	Rank int
	// HRWRank orders the feasible nodes by HRW alone (the second round of
	// claims, see SecondRoundDelay). -1 for an infeasible node.
	HRWRank int
	HRW     uint64
}

// Rank ranks every node of the view for slot of unit u at now: the feasible
// ones first, by Rank, then the infeasible ones by name with their verdicts
// (Rank -1), for explanations. Node order in the view does not matter.
func Rank(u Unit, slot int, v View, now time.Time) []Ranked {
	r := newRanker(u, v, now)
	return r.rank(slot)
}

func (r *ranker) rank(slot int) []Ranked {
	r.prepare(slot)
	out := make([]Ranked, 0, len(r.nodes))
	for _, n := range r.nodes {
		x := Ranked{Node: n.Name, Rank: -1, HRWRank: -1, HRW: HRW(r.unit, slot, n.Name)}
		x.Verdict = feasible(r.unit, &r.p, r.need, n, slot, r.v.Holders, r.heldSlots[n.Name], r.v.Reserved, r.v.Paused, r.m)
		if x.Verdict.OK {
			x.Score = r.score(n, slot)
		}
		out = append(out, x)
	}
	// Sort positions, not the entries (a Ranked is large, and a stable
	// sort of 1,000 of them moved far more than it compared). The order
	// is total: names are unique.
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := &out[i], &out[j]
		switch {
		case a.Verdict.OK != b.Verdict.OK:
			if a.Verdict.OK {
				return -1
			}
			return 1
		case !a.Verdict.OK:
			return strings.Compare(a.Node, b.Node)
		case a.Score.Total != b.Score.Total:
			if a.Score.Total > b.Score.Total {
				return -1
			}
			return 1
		case a.HRW != b.HRW:
			if a.HRW > b.HRW {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Node, b.Node)
	})
	sorted := make([]Ranked, len(out))
	for i, j := range order {
		sorted[i] = out[j]
	}
	out = sorted
	var byHRW []int
	for i := range out {
		if out[i].Verdict.OK {
			out[i].Rank = i
			byHRW = append(byHRW, i)
		}
	}
	slices.SortFunc(byHRW, func(i, j int) int {
		a, b := &out[i], &out[j]
		if a.HRW != b.HRW {
			if a.HRW > b.HRW {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Node, b.Node)
	})
	for k, i := range byHRW {
		out[i].HRWRank = k
	}
	return out
}

// Assignment is the outcome of Assign: per free slot, every node ranked.
type Assignment map[int][]Ranked

// Matched returns the node the slot went to: its rank-0 candidate.
func (a Assignment) Matched(slot int) (string, bool) {
	if rs := a[slot]; len(rs) > 0 && rs[0].Verdict.OK {
		return rs[0].Node, true
	}
	return "", false
}

// Of returns node's entry for slot (its Rank decides its claim delay).
func (a Assignment) Of(slot int, node string) (Ranked, bool) {
	for _, x := range a[slot] {
		if x.Node == node {
			return x, true
		}
	}
	return Ranked{}, false
}

// Assign places several free slots of u at once, the same way on every node
// with the same view: slots ascending (those outside 0..count-1 dropped),
// each ranked as if the slots before it were already held by the node they
// were matched to, and matched to its best feasible node. So a match counts
// toward max_per_node, anti-affinity, spread, load and the node's reserved
// capacity for the next slots:
// with max_per_node = 1, k free slots and at least k feasible nodes go to k
// different nodes. Slots in free count as free whatever Holders says. For
// each slot, the result lists every node as Rank does, the match first; a
// node's Rank there is its round-1 claim rank for the slot.
func Assign(u Unit, free []int, v View, now time.Time) Assignment {
	p := placement(u)
	var slots []int
	for _, k := range free {
		if k >= 0 && k < p.Count {
			slots = append(slots, k)
		}
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)

	holders := maps.Clone(v.Holders)
	if holders == nil {
		holders = map[int]string{}
	}
	for _, k := range slots {
		delete(holders, k)
	}
	load := maps.Clone(v.Load)
	if load == nil {
		load = map[string]int{}
	}
	reserved := maps.Clone(v.Reserved)
	if reserved == nil {
		reserved = map[string]Reservation{}
	}
	v.Holders, v.Load, v.Reserved = holders, load, reserved

	r := newRanker(u, v, now)
	out := make(Assignment, len(slots))
	for _, k := range slots {
		rs := r.rank(k)
		out[k] = rs
		if len(rs) > 0 && rs[0].Verdict.OK {
			holders[k] = rs[0].Node
			load[rs[0].Node]++
			reserved[rs[0].Node] = reserved[rs[0].Node].Add(u.Resources)
		}
	}
	return out
}

// sortNodes orders nodes by name (the first of equal names stays first).
func sortNodes(ns []NodeInfo) {
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
}
