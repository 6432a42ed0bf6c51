package placement

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// HRW is the rendezvous hash of (unit, slot, node): 64-bit FNV-1a over
// "unit\x00slot\x00node" (slot in decimal), then the splitmix64 finaliser,
// since FNV alone leaves the high bits of near-equal node names close. The
// same on every process and architecture.
func HRW(unit string, slot int, node string) uint64 {
	return hrwNode(hrwPrefix(unit, slot), node)
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
	// out and the keys are scratch, reused slot after slot (Assign ranks
	// every free slot of a unit over every node).
	out := r.scratch[:0]
	prefix := hrwPrefix(r.unit, slot)
	for _, n := range r.nodes {
		x := Ranked{Node: n.Name, Rank: -1, HRWRank: -1, HRW: hrwNode(prefix, n.Name)}
		x.Verdict = feasible(r.unit, &r.p, r.need, n, slot, r.v.Holders, r.heldSlots[n.Name], r.v.Reserved, r.v.Paused, r.m)
		if x.Verdict.OK {
			x.Score = r.score(n, slot)
		}
		out = append(out, x)
	}
	// Sort small keys, not the entries (a Ranked is large: sorting 1,000
	// of them, or positions into them, moved and missed the cache far more
	// than it compared). r.nodes is sorted by unique name, so a node's
	// position there orders it as its name does. The order is total.
	keys := r.keys[:0]
	same := true // every feasible node has the same total score
	for i := range out {
		if out[i].Verdict.OK {
			t := out[i].Score.Total
			if len(keys) > 0 && t != keys[0].total || math.IsNaN(t) {
				same = false
			}
			keys = append(keys, rankKey{total: t, hrw: out[i].HRW, idx: int32(i), ok: true})
		}
	}
	feasibleN := len(keys)
	for i := range out {
		if !out[i].Verdict.OK {
			keys = append(keys, rankKey{hrw: out[i].HRW, idx: int32(i)})
		}
	}
	if same {
		// The feasible first, by HRW alone (ties by position), then the
		// infeasible by position, as they already are: the order the
		// comparison below gives, by a radix sort.
		r.tmp = sortByHRW(keys[:feasibleN], r.tmp)
	} else {
		slices.SortFunc(keys, compareKeys)
	}
	sorted := make([]Ranked, len(out))
	byHRW := r.byHRW[:0]
	for i, k := range keys {
		sorted[i] = out[k.idx]
		if k.ok {
			sorted[i].Rank = i
			byHRW = append(byHRW, rankKey{hrw: k.hrw, idx: k.idx, pos: int32(i)})
		}
	}
	r.scratch, r.keys, r.byHRW = out, keys, byHRW
	out = sorted
	slices.SortFunc(byHRW, func(a, b rankKey) int {
		if a.hrw != b.hrw {
			if a.hrw > b.hrw {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.idx, b.idx)
	})
	for k, x := range byHRW {
		out[x.pos].HRWRank = k
	}
	return out
}

// compareKeys is rank's order: the feasible first, by total score
// descending, then HRW descending, then position (name); then the
// infeasible by position.
func compareKeys(a, b rankKey) int {
	switch {
	case a.ok != b.ok:
		if a.ok {
			return -1
		}
		return 1
	case !a.ok:
		return cmp.Compare(a.idx, b.idx)
	case a.total != b.total:
		if a.total > b.total {
			return -1
		}
		return 1
	case a.hrw != b.hrw:
		if a.hrw > b.hrw {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.idx, b.idx)
}

// sortByHRW sorts keys, given by position ascending, by HRW descending,
// ties by position: a stable least-significant-digit radix sort on the
// complement of HRW (eight passes of a byte, those where every key has
// the same byte skipped), with tmp as its buffer (returned, grown).
func sortByHRW(keys, tmp []rankKey) []rankKey {
	if len(keys) < 2 {
		return tmp
	}
	tmp = slices.Grow(tmp[:0], len(keys))[:len(keys)]
	src, dst := keys, tmp
	for shift := uint(0); shift < 64; shift += 8 {
		var count [256]int
		for i := range src {
			count[byte(^src[i].hrw>>shift)]++
		}
		if count[byte(^src[0].hrw>>shift)] == len(src) {
			continue
		}
		sum := 0
		for b := range count {
			count[b], sum = sum, sum+count[b]
		}
		for i := range src {
			b := byte(^src[i].hrw >> shift)
			dst[count[b]] = src[i]
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
	return tmp
}

// rankKey is what rank sorts: a node's score, HRW and position in
// r.nodes (name order); pos, its place once sorted.
type rankKey struct {
	total    float64
	hrw      uint64
	idx, pos int32
	ok       bool
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
