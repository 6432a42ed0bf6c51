package cluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The storm brake (CLUSTER.md section 4). A takeover is a claim of a slot
// lost with its node: the value still says held by another node, and no
// session holds the key. Two things bound takeovers; neither is a safety
// property (the slot locks are):
//
//   - the budget: the slots of at most TakeoverBudget(supervisors) lost
//     nodes are taken over in any TakeoverWindow across the fleet, a tenth
//     of the supervisors, rounded up (Kubernetes' node eviction rate, 0.1
//     node/s, is the same idea). It counts nodes, not instances: every slot
//     of one lost node moves at once, however many it held, so a plain
//     node loss is never slowed. control/takeovers lists the recent
//     takeovers; a takeover's claim txn compare-and-sets it, so the budget
//     is exact at no extra Raft write (the claim is one txn either way),
//     and two nodes racing for the last token cannot both win;
//   - the brake: when more than half of the live supervisors vanish within
//     StormWindow (and at least two do), the first node to see it writes
//     control/storm with its record in one txn, and while that key exists no
//     node takes over a lost slot. Released slots are still placed, and a
//     node coming back claims its own lost slots again. `mariposa resume`
//     deletes the key.
//
// A supervisor vanishes when its mariposa entry in the catalog turns from
// live to not live (serfHealth or the liveness check critical): a node
// lost, cut off or crashed. A mariposa that stops gracefully deregisters
// and releases its slots, so a fleet-wide restart of mariposa never trips
// the brake. Slots lost before the brake engages (the first nodes of a
// storm to vanish) may be taken over within the budget: until more than
// half are gone, a lost node is a node loss.
//
// The brake is fleet-wide, not per zone as CLUSTER.md first sketched: with
// zones of one or two nodes a per-zone majority is a single failure, and a
// whole zone lost is exactly when its slots should move to the other zones.
// What the brake is for is the fleet's own view being wrong (the servers
// cut off from most nodes, a flapping network): that shows fleet-wide.

const (
	// StormWindow is how recently a supervisor must have vanished to count.
	StormWindow = 60 * time.Second
	// TakeoverWindow is the budget's window.
	TakeoverWindow = 10 * time.Second
)

// StormRecord is the value of control/storm.
type StormRecord struct {
	At   time.Time `json:"at"`
	Node string    `json:"node"` // the node that engaged the brake
	// Vanished are the supervisors that vanished within StormWindow, of
	// Base supervisors live at some point in that window.
	Vanished []string `json:"vanished"`
	Base     int      `json:"base"`
}

// Reason is the record's one-line explanation.
func (r StormRecord) Reason() string {
	return fmt.Sprintf("%d of %d supervisors vanished within %s", len(r.Vanished), r.Base, StormWindow)
}

// DecodeStormRecord reads control/storm's value.
func DecodeStormRecord(b []byte) (StormRecord, error) {
	var r StormRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return StormRecord{}, fmt.Errorf("not a mariposa storm record: %w", err)
	}
	if r.At.IsZero() {
		return StormRecord{}, fmt.Errorf("not a mariposa storm record: no time")
	}
	return r, nil
}

func (r StormRecord) encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// StormLifted is the value of control/storm-lifted: the last brake
// mariposa resume lifted (Storm: nil when its record was corrupt), when
// and by whom, and Down, the supervisors not live then (the record's
// vanished and every mariposa instance not passing). When the key moves,
// every node forgets the vanishings it has seen and counts the Down ones
// gone already, those that never saw the brake among them (cut off while
// it was engaged, they may see the same nodes vanish only after the
// resume), so none engages the brake again for the storm an operator
// resumed. A brake's write checks the key is as its node last saw it.
type StormLifted struct {
	At    time.Time    `json:"at"`
	By    string       `json:"by"`
	Storm *StormRecord `json:"storm,omitempty"`
	Down  []string     `json:"down,omitempty"`
}

// DecodeStormLifted reads control/storm-lifted's value.
func DecodeStormLifted(b []byte) (StormLifted, error) {
	var l StormLifted
	if err := json.Unmarshal(b, &l); err != nil {
		return StormLifted{}, fmt.Errorf("not a mariposa storm-lifted record: %w", err)
	}
	return l, nil
}

// StormLiftedCheck is a brake write's check that control/storm-lifted is
// at index, the one its node last saw (0: absent).
func StormLiftedCheck(index uint64) *api.KVTxnOp {
	if index == 0 {
		return &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: StormLiftedKey}
	}
	return &api.KVTxnOp{Verb: api.KVCheckIndex, Key: StormLiftedKey, Index: index}
}

// LiftedDown is the supervisors not live when a brake is lifted: the
// storm record's vanished (r may be nil) and the nodes not live, sorted.
func LiftedDown(r *StormRecord, nodes []placement.NodeInfo) []string {
	down := map[string]bool{}
	if r != nil {
		for _, n := range r.Vanished {
			down[n] = true
		}
	}
	for _, n := range nodes {
		if !n.Live {
			down[n.Name] = true
		}
	}
	out := make([]string, 0, len(down))
	for n := range down {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Encode is control/storm-lifted's value.
func (l StormLifted) Encode() []byte {
	b, _ := json.Marshal(l)
	return b
}

// ReadStorm reads control/storm: nil when the brake is not engaged.
func ReadStorm(client *api.Client) (*StormRecord, error) {
	p, _, err := client.KV().Get(StormKey, &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		return nil, err
	}
	r, err := DecodeStormRecord(p.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", StormKey, err)
	}
	return &r, nil
}

// Storm says whether vanished of base supervisors is a storm: more than
// half, and at least two (a two-node fleet losing one is a node loss).
func Storm(vanished, base int) bool {
	return vanished >= 2 && 2*vanished > base
}

// TakeoverBudget is how many lost nodes' slots may be taken over within a
// TakeoverWindow: a tenth of the supervisors, rounded up, at least one.
func TakeoverBudget(supervisors int) int {
	return max(1, (supervisors+9)/10)
}

// vanishTracker follows which supervisors vanished, and when.
type vanishTracker struct {
	live map[string]bool      // as last observed
	gone map[string]time.Time // vanished (live -> not live), when
}

// observe takes the supervisors as now read and returns those that
// vanished within StormWindow (sorted) and how many were live at some
// point in it (live now plus vanished).
func (t *vanishTracker) observe(nodes []placement.NodeInfo, now time.Time) (vanished []string, base int) {
	if t.live == nil {
		t.live, t.gone = map[string]bool{}, map[string]time.Time{}
	}
	seen := map[string]bool{}
	liveNow := 0
	for _, n := range nodes {
		seen[n.Name] = true
		if n.Live {
			liveNow++
			delete(t.gone, n.Name)
		} else if t.live[n.Name] {
			t.gone[n.Name] = now
		}
		t.live[n.Name] = n.Live
	}
	for n := range t.live {
		if !seen[n] {
			// Deregistered: a graceful stop (its slots were released), or
			// the node reaped. Not a vanishing.
			delete(t.live, n)
			delete(t.gone, n)
		}
	}
	for n, at := range t.gone {
		if now.Sub(at) > StormWindow {
			delete(t.gone, n)
			continue
		}
		vanished = append(vanished, n)
	}
	sort.Strings(vanished)
	return vanished, liveNow + len(vanished)
}

// forget drops the vanishings seen so far.
func (t *vanishTracker) forget() { clear(t.gone) }

// lifted forgets the vanishings seen and counts down as gone already: a
// node seen not live later is no vanishing unless it was seen live first.
func (t *vanishTracker) lifted(down []string) {
	t.forget()
	if t.live == nil {
		t.live, t.gone = map[string]bool{}, map[string]time.Time{}
	}
	for _, n := range down {
		t.live[n] = false
	}
}

// TakeoverLog is the value of control/takeovers: the takeovers started
// within the last TakeoverWindow (older ones are dropped at each write).
type TakeoverLog struct {
	Takeovers []Takeover `json:"takeovers"`
}

// Takeover is one takeover in the log.
type Takeover struct {
	Slot string    `json:"slot"`
	Node string    `json:"node"` // the node that took it over
	From string    `json:"from"` // the node it was lost with
	At   time.Time `json:"at"`
}

// DecodeTakeoverLog reads control/takeovers' value.
func DecodeTakeoverLog(b []byte) (TakeoverLog, error) {
	var l TakeoverLog
	if err := json.Unmarshal(b, &l); err != nil {
		return TakeoverLog{}, fmt.Errorf("not a mariposa takeover log: %w", err)
	}
	return l, nil
}

// allows says whether a takeover from the lost node from, at, fits the
// budget: its node's slots are already being taken over in the window, or
// fewer than budget nodes' are. If not, oldest is the oldest takeover in
// the window (the budget frees up a window after it).
func (l TakeoverLog) allows(from string, at time.Time, budget int) (ok bool, oldest time.Time) {
	nodes := map[string]bool{}
	for _, e := range l.Takeovers {
		if e.At.Before(at.Add(-TakeoverWindow)) {
			continue
		}
		nodes[e.From] = true
		if oldest.IsZero() || e.At.Before(oldest) {
			oldest = e.At
		}
	}
	return nodes[from] || len(nodes) < budget, oldest
}

// with is the log with e added and the entries out of the window dropped.
func (l TakeoverLog) with(e Takeover) TakeoverLog {
	out := TakeoverLog{Takeovers: []Takeover{}}
	for _, x := range l.Takeovers {
		if !x.At.Before(e.At.Add(-TakeoverWindow)) {
			out.Takeovers = append(out.Takeovers, x)
		}
	}
	out.Takeovers = append(out.Takeovers, e)
	return out
}

func (l TakeoverLog) encode() []byte {
	b, _ := json.Marshal(l)
	return b
}
