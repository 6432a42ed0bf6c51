package placement

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// Components is a set of score components.
type Components uint8

// Score components.
const (
	CompAffinity Components = 1 << iota
	CompSpread
	CompAntiAffinity
	CompPenalty
	CompStickiness
	CompLoad
	CompCapacity
)

// Has says whether c includes every component of x.
func (c Components) Has(x Components) bool { return c&x == x }

// String lists the components: "affinity,anti_affinity,load".
func (c Components) String() string {
	names := []string{"affinity", "spread", "anti_affinity", "penalty", "stickiness", "load", "capacity"}
	var out []string
	for i, n := range names {
		if c&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}

// Score is how much a node suits a slot. Every component is in [-1, 1]:
//
//   - Affinity: Σ weights of the affinities the node matches / Σ |weights|.
//     ==~ matches where the attribute equals the value and adds +weight;
//     !=~ matches where it equals the value too and adds −weight, so
//     `!=~ "ssd"` pushes ssd nodes down and leaves the others at 0. Other
//     operators (==, regexp, …) add +weight where the rule holds.
//   - Spread: the weighted mean of each spread's boost (Nomad's): with
//     targets, (desired − (instances on the node's value + 1)) / desired,
//     desired = percent × count, with "*" or the remainder for values not
//     listed and −1 for a value with no share; without targets, +1 for an
//     unused value and less for values already above the least used one.
//     −1 where the attribute is not set.
//   - AntiAffinity: −(instances of the unit on the node + 1) / count when
//     the node already holds some (the slot being placed excluded), else 0.
//   - Penalty: −1 while the node's reschedule penalty runs.
//   - Stickiness: +1 on the node that held the slot last, for a unit with a
//     volume.
//   - Load: −(slots of all units on the node) / (the most any node holds).
//   - Capacity: for a unit that reserves resources, how full the node would
//     be with the slot placed (the mean over cpu and memory of reserved /
//     offered, see fullness): +fullness when the unit bin-packs (the
//     default, Nomad's: fill a node before starting on the next, leaving
//     whole nodes free for big slots), −fullness when it spreads
//     (scheduler_algorithm = "spread"). 0 on a node of unknown capacity.
//
// Total is the mean of the components in Applied, which are the same for
// every node of one ranking: affinity and spread when the unit has some,
// penalty when some node's penalty runs, stickiness when the slot
// has a previous node and the unit a volume, anti-affinity always, and
// capacity for a unit with resources, else load (which spreads slots by
// their count, the only measure of a unit that reserves nothing).
// (Nomad averages only the scores each node received, so its denominator
// varies by node; a common one keeps a component's effect independent of
// the others, and the order is that of the sum.) Total is rounded to 1e-9 so
// that every node, whatever its architecture, ranks equal scores as ties.
type Score struct {
	Affinity, Spread, AntiAffinity, Penalty, Stickiness, Load, Capacity float64
	Applied                                                             Components
	Total                                                               float64
}

// ScoreNode scores node n for slot of unit u at now. It does not check
// feasibility.
func ScoreNode(u Unit, n NodeInfo, slot int, v View, now time.Time) Score {
	r := newRanker(u, v, now)
	r.prepare(slot)
	return r.score(n, slot)
}

// ranker holds what scoring one unit over one view needs, computed once.
type ranker struct {
	unit      string
	p         schema.Placement
	sticky    bool
	need      Reservation // what a slot reserves
	spreadAlg bool        // scheduler_algorithm = "spread"
	v         View
	now       time.Time
	m         *matcher
	nodes     []NodeInfo     // unique names, sorted
	index     map[string]int // name -> position in nodes
	// Per slot (prepare):
	held map[string]int // node -> slots of the unit held, the slot excluded
	// heldSlots: node -> those slots, ascending (one pass over the
	// holders per slot, not one per node).
	heldSlots map[string][]int
	spreads   []map[string]int // per spread: value -> instances, the slot excluded
	maxLoad   int
	applied   Components
	// Scratch for rank, reused from slot to slot.
	scratch []Ranked
	keys    []rankKey
	byHRW   []rankKey
	tmp     []rankKey
}

func newRanker(u Unit, v View, now time.Time) *ranker {
	r := &ranker{unit: u.Name, p: placement(u), sticky: u.HasVolume, need: u.Resources, v: v, now: now, m: newMatcher(),
		index: make(map[string]int, len(v.Nodes))}
	for _, n := range v.Nodes {
		if _, dup := r.index[n.Name]; dup {
			continue
		}
		r.index[n.Name] = -1
		r.nodes = append(r.nodes, n)
	}
	sortNodes(r.nodes)
	for i, n := range r.nodes {
		r.index[n.Name] = i
	}
	r.spreadAlg = r.p.SchedulerAlgorithm == schema.AlgorithmSpread
	return r
}

// prepare computes the per-slot state from the view's holders and load.
func (r *ranker) prepare(slot int) {
	r.held = map[string]int{}
	r.heldSlots = map[string][]int{}
	for k, h := range r.v.Holders {
		if h != "" && k != slot {
			r.held[h]++
			r.heldSlots[h] = append(r.heldSlots[h], k)
		}
	}
	for _, ks := range r.heldSlots {
		sort.Ints(ks)
	}
	r.spreads = make([]map[string]int, len(r.p.Spreads))
	for i, s := range r.p.Spreads {
		if s == nil {
			continue
		}
		use := map[string]int{}
		for node, c := range r.held {
			j, ok := r.index[node]
			if !ok {
				continue // a holder we know nothing of: its value is unknown
			}
			if val, set, err := Attr(r.nodes[j], s.Attribute); err == nil && set {
				use[val] += c
			}
		}
		r.spreads[i] = use
	}
	r.maxLoad = 0
	for _, l := range r.v.Load {
		r.maxLoad = max(r.maxLoad, l)
	}
	r.applied = CompAntiAffinity
	if r.need.IsZero() {
		r.applied |= CompLoad
	} else {
		r.applied |= CompCapacity
	}
	if affinityWeights(r.p.Affinities) > 0 {
		r.applied |= CompAffinity
	}
	if len(r.p.Spreads) > 0 {
		r.applied |= CompSpread
	}
	for _, until := range r.v.Penalties {
		if until.After(r.now) {
			r.applied |= CompPenalty
			break
		}
	}
	if r.sticky && r.v.Previous[slot] != "" {
		r.applied |= CompStickiness
	}
}

func (r *ranker) penalised(node string) bool {
	until, ok := r.v.Penalties[node]
	return ok && until.After(r.now)
}

func (r *ranker) score(n NodeInfo, slot int) Score {
	s := Score{Applied: r.applied}
	if r.applied.Has(CompAffinity) {
		s.Affinity = r.affinity(n)
	}
	if r.applied.Has(CompSpread) {
		s.Spread = r.spread(n)
	}
	if c := r.held[n.Name]; c > 0 {
		if r.p.Count > 0 {
			s.AntiAffinity = clamp(-float64(c+1) / float64(r.p.Count))
		} else {
			s.AntiAffinity = -1
		}
	}
	if r.penalised(n.Name) {
		s.Penalty = -1
	}
	if r.applied.Has(CompStickiness) && r.v.Previous[slot] == n.Name {
		s.Stickiness = 1
	}
	if l := r.v.Load[n.Name]; l > 0 && r.maxLoad > 0 && r.applied.Has(CompLoad) {
		s.Load = clamp(-float64(l) / float64(r.maxLoad))
	}
	if r.applied.Has(CompCapacity) {
		used := r.v.Reserved[n.Name]
		if r.v.Holders[slot] == n.Name {
			used = used.Sub(r.need)
		}
		s.Capacity = fullness(r.need, n.Capacity, used)
		if r.spreadAlg {
			s.Capacity = -s.Capacity
		}
	}
	sum, k := 0.0, 0
	for _, c := range []struct {
		comp Components
		v    float64
	}{{CompAffinity, s.Affinity}, {CompSpread, s.Spread}, {CompAntiAffinity, s.AntiAffinity},
		{CompPenalty, s.Penalty}, {CompStickiness, s.Stickiness}, {CompLoad, s.Load}, {CompCapacity, s.Capacity}} {
		if r.applied.Has(c.comp) {
			sum += c.v
			k++
		}
	}
	if k > 0 {
		s.Total = math.Round(sum/float64(k)*1e9) / 1e9
	}
	return s
}

func weight(w, def int) float64 {
	if w == 0 {
		return float64(def)
	}
	return float64(w)
}

func affinityWeights(as []*schema.Affinity) float64 {
	sum := 0.0
	for _, a := range as {
		if a != nil {
			sum += math.Abs(weight(a.Weight, schema.DefaultAffinityWeight))
		}
	}
	return sum
}

func (r *ranker) affinity(n NodeInfo) float64 {
	total := affinityWeights(r.p.Affinities)
	if total == 0 {
		return 0
	}
	sum := 0.0
	for _, a := range r.p.Affinities {
		if a == nil {
			continue
		}
		value, set, err := Attr(n, a.Attribute)
		if err != nil {
			continue
		}
		// A broken rule (bad regexp) matches nowhere, as in Nomad.
		if ok, err := r.m.holds(a.Attribute, a.Operator, a.Value, value, set); ok && err == nil {
			w := weight(a.Weight, schema.DefaultAffinityWeight)
			if a.Operator == schema.OpAvoid {
				w = -w
			}
			sum += w
		}
	}
	return clamp(sum / total)
}

func (r *ranker) spread(n NodeInfo) float64 {
	sum, total := 0.0, 0.0
	for i, s := range r.p.Spreads {
		if s == nil {
			continue
		}
		w := math.Abs(weight(s.Weight, schema.DefaultSpreadWeight))
		total += w
		sum += float64(w * r.spreadBoost(s, r.spreads[i], n))
	}
	if total == 0 {
		return 0
	}
	return clamp(sum / total)
}

// spreadBoost is one spread's boost for n in [-1, 1], after Nomad's: use
// counts the unit's instances per attribute value, the slot excluded.
func (r *ranker) spreadBoost(s *schema.Spread, use map[string]int, n NodeInfo) float64 {
	val, set, err := Attr(n, s.Attribute)
	if err != nil || !set {
		return -1
	}
	if len(s.Targets) == 0 {
		return evenBoost(use, val)
	}
	desired := map[string]float64{}
	sumDesired := 0.0
	for _, t := range s.Targets {
		d := float64(float64(t.Percent) / 100 * float64(r.p.Count)) // conversion: no fused multiply-add
		desired[t.Value] += d
		sumDesired += d
	}
	if _, ok := desired["*"]; !ok && sumDesired > 0 && sumDesired < float64(r.p.Count) {
		desired["*"] = float64(r.p.Count) - sumDesired
	}
	d, ok := desired[val]
	if !ok {
		d, ok = desired["*"]
	}
	if !ok || !(d > 0) {
		return -1
	}
	return clamp((d - float64(use[val]+1)) / d)
}

// evenBoost: nothing placed yet scores 0; a value below the least used one
// (unused) scores +1; above it, −(excess / least); at the least when all
// are even, −1; at the least when others are above, +(spread / least).
func evenBoost(use map[string]int, val string) float64 {
	lo, hi := 0, 0
	for _, c := range use {
		if c <= 0 {
			continue
		}
		if lo == 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	if lo == 0 {
		return 0
	}
	cur := max(use[val], 0)
	switch {
	case cur != lo:
		return clamp(float64(lo-cur) / float64(lo))
	case lo == hi:
		return -1
	}
	return clamp(float64(hi-lo) / float64(lo))
}

func clamp(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case x < -1:
		return -1
	case x > 1:
		return 1
	}
	return x
}
