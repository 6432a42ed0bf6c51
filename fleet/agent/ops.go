package agent

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The operator's controls and the fleet's brakes in the step machine
// (CLUSTER.md sections 4 and 6; the keys, codecs and pure rules are
// cluster/pause.go's, drain.go's and storm.go's): pause, drain, the storm
// brake and the takeover budget. They are
// on when Config.Control is set: the executor then watches control/ and
// feeds its answers (ControlAnswer), and the agent claims nothing before
// the first one.
//
//   - A unit paused for placement (its own pause, or the fleet's, scope
//     placement or all) gets no new claim from this node; what runs keeps
//     running, scale-downs, strays and drains go on (they are not
//     placement). Each slot held back is recorded once ("hold"); at the
//     resume its vacancy starts again, so the ranks stay apart.
//   - A draining node (control/drain/<node>) is ranked out of placement by
//     every node and claims nothing. It gives its slots away one at a
//     time, in slot order: a non-exclusive slot is released while its
//     instance keeps running (an orphan), which stops once another node
//     holds the slot; an exclusive slot's instance stops, then the slot is
//     released. The next slot goes once the last one is held elsewhere,
//     or handoffTimeout after. A slot no other node can take (every other
//     live node draining or at max_per_node) stays, running, unless the
//     drain is forced and past its deadline; past the deadline, every
//     slot goes at once. The node publishes its drain's status
//     (DrainStatusKey): the slots it holds, those stuck, and done only when
//     it holds nothing, as far as it knows and as every index it reads
//     shows (a claim whose answer was lost counts as held until a newer
//     index says otherwise).
//   - A takeover is a claim of a slot freed by an invalidation (lost with
//     its node, not released). While the storm brake is engaged
//     (control/storm, or this node's own write of it) no takeover is
//     claimed but of this node's own lost slots. Every takeover spends the
//     fleet's budget (cluster.TakeoverBudget lost nodes per
//     cluster.TakeoverWindow): the claim's transaction compare-and-sets
//     control/takeovers on the index this node read (Claim.Takeover), so
//     two nodes racing for the last of it cannot both win; refused, the
//     slot waits for a newer answer of control/.
//   - The brake is written (WriteBrake: check-not-exists and set, in one
//     transaction, with a check that control/storm-lifted is as this node
//     last saw it) when this node sees more than half of the supervisors
//     vanish within cluster.StormWindow (cluster.Storm); its lifting
//     (mariposa resume deletes the key and writes control/storm-lifted)
//     forgets the vanishings seen, on every node, those that never saw
//     the brake too.

// handoffTimeout bounds how long a drain waits for a slot it gave away to
// be held elsewhere before it gives the next (cluster's drain: 2 minutes).
const handoffTimeout = 2 * time.Minute

// DrainStatusKey is nodes/<node>/drain: the node's drain as it reports it.
func DrainStatusKey(node string) string { return cluster.Prefix + "nodes/" + node + "/drain" }

// DrainStatus is what a draining node publishes.
type DrainStatus struct {
	Node  string   `json:"node"`
	Held  []string `json:"held"`            // slots it holds ("<unit>/<k>")
	Stuck []string `json:"stuck,omitempty"` // of those, the ones no other node can take
	Done  bool     `json:"done"`            // it holds nothing
}

func (s DrainStatus) equal(o DrainStatus) bool {
	return s.Node == o.Node && s.Done == o.Done && slices.Equal(s.Held, o.Held) && slices.Equal(s.Stuck, o.Stuck)
}

// ControlView is one answer of the watch on control/ (cluster.ParseControl).
type ControlView struct {
	Index uint64
	cluster.Control
}

// Inputs of the controls.
type (
	// ControlAnswer: a new answer of the watch on control/.
	ControlAnswer struct{ View *ControlView }
	// BrakeDone answers WriteBrake: OK, applied at Index; refused (the
	// brake was engaged already) with neither OK nor Err.
	BrakeDone struct {
		OK    bool
		Index uint64
		Err   error
	}
	// WatchResumed: the executor's watches broke (cut off, no leader) and
	// answer again: the next answer of each unit may have skipped states,
	// so it says nothing of who held a slot it shows lost.
	WatchResumed struct{}
	// HeldChecked answers CheckHeld: which of the slots the session holds.
	HeldChecked struct {
		Held map[SlotID]bool
		Err  error
	}
	// DrainPublished answers PublishDrain.
	DrainPublished struct {
		Status DrainStatus
		OK     bool
	}
	// SuccessorPassing answers AwaitSuccessor: the slot's instances pass
	// their checks on another node, or the wait gave up (the handoff's
	// timeout bounds it either way).
	SuccessorPassing struct{ Slot SlotID }
)

// Actions of the controls.
type (
	// WriteBrake engages the storm brake: create control/storm with Record
	// if it does not exist (answer: BrakeDone).
	// Lifted: control/storm-lifted's index this node last saw (0:
	// absent), checked in the same transaction, so a node whose view
	// predates a resume does not engage the brake again for the storm it
	// lifted.
	WriteBrake struct {
		Record cluster.StormRecord
		Lifted uint64
	}
	// PublishDrain writes Status to DrainStatusKey (answer:
	// DrainPublished).
	PublishDrain struct{ Status DrainStatus }
	// CheckHeld: one consistent read of the slot keys (answer:
	// HeldChecked), for a draining node's claims whose answer was lost:
	// the index answers only when it moves, which a claim never applied
	// does not make it do.
	CheckHeld struct {
		Slots   []SlotID
		Session string
	}
	// AwaitSuccessor: a drained non-exclusive slot is held by another
	// node; answer SuccessorPassing once each of Services runs there as
	// <service>-<k> with its checks passing in Consul, so the old
	// instance, still running, stops only then (website/commands/drain.md:
	// the count is kept).
	AwaitSuccessor struct {
		Slot     SlotID
		Services []string
	}
)

// TakeoverCAS is a takeover's spending of the budget, carried out in its
// claim's transaction: control/takeovers compare-and-set from Index (0:
// absent) to Log, which holds Entry. Refused: ClaimDone.Budget.
//
// Logged false: the log already has a takeover from the same lost node
// within FreshTakeover, so this one spends nothing and writes nothing (its
// node stays in every window that this one's would be in, give or take
// FreshTakeover): the slots of one lost node are taken over without
// contending for the one key, which otherwise every takeover of the fleet
// does (one winner per answer of control/).
type TakeoverCAS struct {
	Index  uint64
	Log    cluster.TakeoverLog
	Entry  cluster.Takeover
	Logged bool
}

// FreshTakeover: a takeover from a lost node whose last logged takeover is
// this recent is not logged again.
const FreshTakeover = time.Second

// hold kinds: why a claim is held back.
const (
	holdPause = iota + 1
	holdBrake
	holdBudget
)

type heldBack struct {
	kind int
	why  string
	// rank: a claim held by a pause, the node's place for it (the
	// queue's detail, "rank 1 of 3").
	rank claimRank
}

// claimRank is a node's first-round rank for a slot, of how many nodes
// may hold it.
type claimRank struct{ rank, of int }

func (c claimRank) String() string { return fmt.Sprintf("rank %d of %d", c.rank+1, c.of) }

type handoff struct {
	since     time.Time
	releasing bool // a non-exclusive slot's release on its way
	// asked: AwaitSuccessor sent; passed: its answer came (the new
	// holder's instances pass).
	asked, passed bool
}

type opsState struct {
	ctl *ControlView
	// The brake: the vanishings seen, the record to write when they make
	// a storm, this node's own write (the index it was applied at, until
	// an answer of control/ at or after it), and when to try again.
	vanish  cluster.VanishTracker
	base    int
	storm   *cluster.StormRecord
	braking bool
	// lifted: control/storm-lifted's index as last seen.
	lifted     uint64
	brakeIdx   uint64
	brakeRetry time.Time
	// The drain.
	handoffs     map[SlotID]*handoff
	published    *DrainStatus
	publishing   bool
	publishRetry time.Time
	// maybe: claims whose answer was lost, with the index of their unit's
	// view then: held, for the drain's status, until a newer view does not
	// show them.
	maybe    map[SlotID]uint64
	checking bool
	checkAt  time.Time
	// Claims held back (recorded once each), the last holder of free
	// slots freed by an invalidation (the takeover's "from"), and the
	// control/ index at which a takeover's budget CAS was refused.
	held     map[SlotID]heldBack
	lostFrom map[SlotID]string
	gap      map[string]bool // units whose next answer follows a break
	// budgetAt: a takeover held back for the budget is claimed no sooner
	// than the budget frees up plus its rank's delay (the ranks stay
	// apart, rather than every node claiming as the window moves on).
	budgetAt map[SlotID]time.Time
	refused  map[SlotID]uint64
	// casFrom: the takeovers log's index each takeover claim in flight
	// compares and sets from.
	casFrom map[SlotID]uint64
	// existed: slots whose Fresh claim found the key existing (ClaimDone.
	// NotFresh): claimed as takeovers from then on.
	existed   map[SlotID]bool
	rankView  *NodesView
	rankNodes uint64
	rankDrain uint64
}

func (o *opsState) init() {
	if o.handoffs == nil {
		o.handoffs, o.maybe, o.held, o.lostFrom, o.refused = map[SlotID]*handoff{}, map[SlotID]uint64{}, map[SlotID]heldBack{}, map[SlotID]string{}, map[SlotID]uint64{}
		o.gap, o.budgetAt, o.existed, o.casFrom = map[string]bool{}, map[SlotID]time.Time{}, map[SlotID]bool{}, map[SlotID]uint64{}
	}
}

// stormOn: the brake is engaged as this node knows.
func (a *Agent) stormOn() bool {
	return a.ops.brakeIdx != 0 || (a.ops.ctl != nil && a.ops.ctl.Storm != nil)
}

// draining: node is draining as this node's control/ answer says.
func (a *Agent) draining(node string) (cluster.DrainRecord, bool) {
	if a.ops.ctl == nil {
		return cluster.DrainRecord{}, false
	}
	d, ok := a.ops.ctl.Drains[node]
	return d, ok
}

// Draining says whether this node is draining (as it knows).
func (a *Agent) Draining() bool { _, ok := a.draining(a.cfg.Node); return ok }

// stepOps takes the controls' inputs (handled: nothing else to do but
// reconcile) and notes what the slot protocol's inputs mean for them.
func (a *Agent) stepOps(now time.Time, in any) (out []any, handled bool) {
	if !a.cfg.Control {
		return nil, false
	}
	a.ops.init()
	switch in := in.(type) {
	case WatchResumed:
		a.noteGap()
		return nil, true
	case SessionLost:
		// Its watches may have been cut off as long; what it may have
		// claimed went with the session.
		a.noteGap()
		clear(a.ops.maybe)
	case HeldChecked:
		a.ops.checking, a.ops.checkAt = false, now.Add(time.Second)
		if in.Err == nil {
			for id, held := range in.Held {
				if !held {
					delete(a.ops.maybe, id)
				}
			}
		}
		return nil, true
	case ControlAnswer:
		old := a.ops.ctl
		if old != nil && in.View.Index < old.Index {
			return nil, true
		}
		a.ops.ctl = in.View
		if a.ops.brakeIdx != 0 && in.View.Index >= a.ops.brakeIdx {
			a.ops.brakeIdx = 0
		}
		if in.View.Storm != nil {
			a.ops.storm = nil
		}
		resumed := old != nil && old.Storm != nil && in.View.Storm == nil
		if in.View.LiftedIndex != a.ops.lifted && !a.cfg.Faults.ForgetOnlyOnLift {
			// A resume, whether this node saw the brake or not (cut off
			// while it was engaged: it would engage it again for the
			// same storm, and no operator is there to resume twice).
			a.ops.lifted, resumed = in.View.LiftedIndex, true
		}
		if resumed {
			// Resumed: the vanishings that engaged the brake are dealt
			// with; only new ones count towards the next storm, and the
			// nodes down at the resume are no new ones when this node
			// sees them down only now.
			var down []string
			if in.View.Lifted != nil && !a.cfg.Faults.ForgetOnlyOnLift {
				down = in.View.Lifted.Down
			}
			a.ops.vanish.Lifted(down)
			a.ops.storm = nil
		}
		// Claims held back for a pause or the brake that is lifted: their
		// vacancies start again now, so the ranks stay apart.
		for id, hb := range a.ops.held {
			lifted := false
			switch hb.kind {
			case holdPause:
				_, paused := in.View.Paused(id.Unit, cluster.PausePlacement)
				lifted = !paused
			case holdBrake:
				lifted = !a.stormOn()
			case holdFailed:
				_, failed := a.failedIn(in.View, id)
				lifted = !failed
			}
			if lifted {
				delete(a.ops.held, id)
				delete(a.rec(id.Unit).vacant, id.K)
			}
		}
		for id, idx := range a.ops.refused {
			if in.View.Index > idx {
				delete(a.ops.refused, id)
			}
		}
		a.dirtyAll()
		return nil, true
	case BrakeDone:
		a.ops.braking = false
		switch {
		case in.OK:
			a.ops.brakeIdx, a.ops.storm = max(in.Index, 1), nil
			a.dirtyAll()
		case in.Err != nil:
			a.ops.brakeRetry = now.Add(time.Second)
		default:
			a.ops.storm = nil // engaged by another node: its answer comes
		}
		return nil, true
	case SuccessorPassing:
		if ho := a.ops.handoffs[in.Slot]; ho != nil {
			ho.passed = true
			a.dirtyAll()
		}
		return nil, true
	case DrainPublished:
		a.ops.publishing = false
		if in.OK {
			s := in.Status
			a.ops.published = &s
		} else {
			a.ops.publishRetry = now.Add(time.Second)
		}
		return nil, true
	case SlotsAnswer:
		a.noteLostFrom(a.slots[in.View.Unit], in.View)
		for id, idx := range a.ops.maybe {
			if id.Unit == in.View.Unit && in.View.Index > idx && in.View.holder(id.K) != a.cfg.Node {
				delete(a.ops.maybe, id)
			}
		}
	case NodesAnswer:
		a.observeVanish(now, in.View)
	case ClaimDone:
		if h := a.held[in.Slot]; h != nil && h.phase == Claiming {
			if in.NotFresh {
				a.ops.existed[in.Slot] = true
			}
			from, cas := a.ops.casFrom[in.Slot]
			delete(a.ops.casFrom, in.Slot)
			// Not again on the view it was refused on: a newer answer of
			// control/ first. Unless the view already has a newer log than
			// the one the CAS was from: the answer with the takeover that
			// beat it came before the refusal, and no other may come (a
			// slot left vacant for good, CI's TestFleetStormBrake).
			if a.ops.ctl != nil && (in.Failed || in.Budget && (!cas || a.ops.ctl.TakeoversIndex == from || a.cfg.Faults.RefusedWaitsAnyway)) {
				a.ops.refused[in.Slot] = a.ops.ctl.Index
			}
			if in.Lost {
				var idx uint64
				if v := a.slots[in.Slot.Unit]; v != nil {
					idx = v.Index
				}
				a.ops.maybe[in.Slot] = idx
			}
		}
	case ReleaseDone:
		if ho := a.ops.handoffs[in.Slot]; ho != nil && ho.releasing {
			ho.releasing = false
			h := a.held[in.Slot]
			switch {
			case h == nil:
				delete(a.ops.handoffs, in.Slot)
			case in.OK:
				// Released with its instance running: it stops once
				// another node holds the slot (or at the timeout).
				h.orphan = true
			default:
				delete(a.ops.handoffs, in.Slot) // given again at the next look
			}
			return nil, true
		}
	}
	return nil, false
}

// noteGap: every unit's next answer may follow skipped states.
func (a *Agent) noteGap() {
	for u := range a.slots {
		a.ops.gap[u] = true
	}
}

// noteLostFrom keeps the last holder of the slots a new answer shows freed
// without a release: a takeover's "from".
func (a *Agent) noteLostFrom(old, v *SlotsView) {
	for id := range a.ops.lostFrom {
		if id.Unit == v.Unit {
			if s := v.slot(id.K); s.Node != "" || s.Released {
				delete(a.ops.lostFrom, id)
			}
		}
	}
	if a.ops.gap[v.Unit] {
		// The old answer may be long gone: its holders say nothing of
		// who held a slot last.
		delete(a.ops.gap, v.Unit)
		for id := range a.ops.lostFrom {
			if id.Unit == v.Unit {
				delete(a.ops.lostFrom, id)
			}
		}
		return
	}
	if old == nil {
		return
	}
	for k, n := range old.nodeOf {
		if n != "" && v.holder(k) == "" && !v.slot(k).Released {
			a.ops.lostFrom[SlotID{v.Unit, k}] = n
		}
	}
}

// observeVanish follows the supervisors vanishing; a storm makes the
// brake's record, written at the next look.
func (a *Agent) observeVanish(now time.Time, v *NodesView) {
	infos := make([]placement.NodeInfo, 0, len(v.Nodes)+len(v.Failing))
	for _, n := range v.Nodes {
		infos = append(infos, placement.NodeInfo{Name: n, Live: true})
	}
	for _, n := range v.Failing {
		infos = append(infos, placement.NodeInfo{Name: n})
	}
	vanished, base := a.ops.vanish.Observe(infos, now)
	a.ops.base = base
	if cluster.Storm(len(vanished), base) && !a.stormOn() {
		a.ops.storm = &cluster.StormRecord{At: now, Node: a.cfg.Node, Vanished: vanished, Base: base}
	}
}

// rankNodes is the nodes view placement ranks with: the draining nodes
// left out. Its index is the live nodes' and the drains' (every node with
// the same two answers has the same one: the simulator shares rankings by
// it).
func (a *Agent) rankNodes() *NodesView {
	if !a.cfg.Control || a.nodes == nil || a.ops.ctl == nil || len(a.ops.ctl.Drains) == 0 {
		return a.nodes
	}
	names := make([]string, 0, len(a.ops.ctl.Drains))
	for n := range a.ops.ctl.Drains {
		names = append(names, n)
	}
	sort.Strings(names)
	h := fnv.New32a()
	h.Write([]byte(strings.Join(names, "\x00")))
	drain := uint64(h.Sum32() | 1<<31)
	if a.ops.rankView != nil && a.ops.rankNodes == a.nodes.Index && a.ops.rankDrain == drain {
		return a.ops.rankView
	}
	v := &NodesView{Index: a.nodes.Index<<32 | drain, Failing: a.nodes.Failing, Info: a.nodes.Info}
	for _, n := range a.nodes.Nodes {
		if _, d := a.ops.ctl.Drains[n]; !d {
			v.Nodes = append(v.Nodes, n)
		}
	}
	a.ops.rankView, a.ops.rankNodes, a.ops.rankDrain = v, a.nodes.Index, drain
	return v
}

// holdBack notes a claim held back, recorded once per reason.
func (a *Agent) holdBack(id SlotID, kind int, why string, out []any) []any {
	if hb, ok := a.ops.held[id]; ok && hb.why == why {
		return out
	}
	a.ops.held[id] = heldBack{kind: kind, why: why}
	return append(out, Record{Slot: id, Action: "hold", Reason: why})
}

// gateClaim says whether this node may claim slot k of u now, as the
// controls decide, and returns the budget's CAS when the claim is a
// takeover, or fresh when it may be of a slot never held (Claim.Fresh). d is the slot's claim delay (a claim waiting for the budget
// keeps its rank's distance).
func (a *Agent) gateClaim(now time.Time, u Unit, v *SlotsView, k int, d time.Duration, rank claimRank, out []any) (tk *TakeoverCAS, fresh, may bool, _ []any) {
	if !a.cfg.Control {
		return nil, false, true, out
	}
	a.ops.init()
	ctl := a.ops.ctl
	if ctl == nil {
		return nil, false, false, out // not before the first answer of control/
	}
	if _, ok := a.draining(a.cfg.Node); ok {
		return nil, false, false, out
	}
	id := SlotID{u.Name, k}
	if r, ok := ctl.Paused(u.Name, cluster.PausePlacement); ok && !a.cfg.Faults.IgnorePause {
		out = a.holdBack(id, holdPause, "claims paused: "+r.Why(), out)
		hb := a.ops.held[id]
		hb.rank = rank // the latest ranking's (the queue lists it)
		a.ops.held[id] = hb
		return nil, false, false, out
	}
	if r, failed := a.failedIn(ctl, id); failed {
		return nil, false, false, a.holdBack(id, holdFailed, "failed on "+r.Node+": "+r.Reason+" (mariposa reset "+id.String()+")", out)
	}
	if idx, ok := a.ops.refused[id]; ok && idx >= ctl.Index {
		return nil, false, false, out // refused by the failed mark or the budget's CAS: a newer control/ first
	}
	from, takeover := a.takeoverFrom(v, k)
	if !takeover || from == a.cfg.Node {
		delete(a.ops.held, id)
		return nil, false, true, out
	}
	if strings.HasPrefix(from, UnknownHolder) && !a.ops.existed[id] {
		// Perhaps never held (a new unit, a raised count): no takeover
		// if its key does not exist, which the claim checks.
		delete(a.ops.held, id)
		return nil, true, true, out
	}
	if a.stormOn() && !a.cfg.Faults.IgnoreBrake {
		return nil, false, false, a.holdBack(id, holdBrake, "takeovers paused by the storm brake (mariposa resume)", out)
	}
	if idx, ok := a.ops.refused[id]; ok && idx >= ctl.Index {
		return nil, false, false, out // the budget's CAS was refused: a newer log first
	}
	wait := func(at time.Time) {
		if t, w := a.waitAt[u.Name]; !w || at.Before(t) {
			a.setWait(a.rec(u.Name), u.Name, at)
		}
	}
	if t, ok := a.ops.budgetAt[id]; ok && now.Before(t) {
		wait(t)
		return nil, false, false, out
	}
	budget := cluster.TakeoverBudget(max(a.ops.base, len(a.nodes.Nodes)))
	ok, oldest := ctl.Takeovers.Allows(from, now, budget)
	if !ok {
		at := oldest.Add(cluster.TakeoverWindow + d)
		a.ops.budgetAt[id] = at
		wait(at)
		return nil, false, false, a.holdBack(id, holdBudget, fmt.Sprintf("the takeover budget is spent (%d lost nodes per %s)", budget, cluster.TakeoverWindow), out)
	}
	delete(a.ops.budgetAt, id)
	delete(a.ops.held, id)
	e := cluster.Takeover{Slot: id.String(), Node: a.cfg.Node, From: from, At: now}
	// Its record is the claim's (claimRecord): "takeover from a lost
	// node" (website/operations.md).
	for _, x := range ctl.Takeovers.Takeovers {
		if x.From == from && !x.At.Before(now.Add(-FreshTakeover)) && !a.cfg.Faults.LogEveryTakeover {
			return &TakeoverCAS{Entry: e}, false, true, out
		}
	}
	return &TakeoverCAS{Index: ctl.TakeoversIndex, Log: ctl.Takeovers.With(e), Entry: e, Logged: true}, false, true, out
}

// UnknownHolder prefixes a takeover's "from" when this node never saw the
// slot held (it started after the loss, or the slot is new): the index
// cannot say who held it (the holder's keys went with its session), so
// each such slot counts as a lost node of its own ("?<unit>/<k>"): the
// budget may be spent faster than need be, never overspent.
const UnknownHolder = "?"

// takeoverFrom: claiming free slot k would take it over (it is not marked
// released), and from whom.
func (a *Agent) takeoverFrom(v *SlotsView, k int) (string, bool) {
	if v.slot(k).Released {
		return "", false
	}
	if a.ownLost[SlotID{v.Unit, k}] {
		return a.cfg.Node, true // its own (stopafter.go), whatever the views missed
	}
	if n, ok := a.ops.lostFrom[SlotID{v.Unit, k}]; ok {
		return n, true
	}
	return UnknownHolder + SlotID{v.Unit, k}.String(), true
}

// reconcileOps is what follows from the controls at now: the brake's
// write, the drain's next step and its status.
func (a *Agent) reconcileOps(now time.Time, out []any, at func(time.Time)) []any {
	if !a.cfg.Control || a.ops.ctl == nil || a.session == "" {
		return out
	}
	a.ops.init()
	out = a.reconcileFails(out)
	if a.ops.storm != nil && !a.ops.braking && !a.stormOn() {
		if now.Before(a.ops.brakeRetry) {
			at(a.ops.brakeRetry)
		} else {
			a.ops.braking = true
			r := *a.ops.storm
			out = append(out, WriteBrake{Record: r, Lifted: a.ops.lifted},
				Record{Action: "storm-brake", Reason: r.Reason() + "; takeovers of lost slots paused until mariposa resume"})
		}
	}
	d, draining := a.draining(a.cfg.Node)
	if !draining {
		clear(a.ops.handoffs)
		return out
	}
	past := !now.Before(d.Deadline)
	// The handoffs under way: done once another node holds the slot, or
	// at the timeout; the orphan left running stops then.
	busy := false
	ids := make([]SlotID, 0, len(a.ops.handoffs))
	for id := range a.ops.handoffs {
		ids = append(ids, id)
	}
	sortSlots(ids)
	for _, id := range ids {
		ho := a.ops.handoffs[id]
		if ho.releasing {
			busy = true
			continue
		}
		v := a.slots[id.Unit]
		moved := v != nil && v.holder(id.K) != "" && v.holder(id.K) != a.cfg.Node
		timeout := !now.Before(ho.since.Add(handoffTimeout))
		if moved && !ho.passed && !timeout {
			// Held elsewhere: the old instance runs on until the new
			// one passes its checks (the count kept).
			if !ho.asked {
				ho.asked = true
				u := a.units[id.Unit]
				out = append(out, AwaitSuccessor{Slot: id, Services: u.services()})
			}
			busy = true
			at(ho.since.Add(handoffTimeout))
			continue
		}
		if !moved && !timeout {
			busy = true
			at(ho.since.Add(handoffTimeout))
			continue
		}
		if h := a.held[id]; h != nil && h.orphan && h.phase != Stopping {
			h.phase = Stopping
			why := "its instance passes on the node that holds the slot now"
			if !moved {
				why = "no other node took the slot within " + handoffTimeout.String()
			}
			out = append(out, Stop{Slot: id}, Record{Slot: id, Action: "orphan-stop", Reason: "drained: the old instance stops: " + why})
		}
		delete(a.ops.handoffs, id)
	}
	// The next slot to give away (every one past the deadline).
	var stuck []string
	gave := false
	for _, id := range a.heldIDs() {
		h := a.held[id]
		if h.phase != Running || h.lost || h.orphan || a.ops.handoffs[id] != nil {
			continue
		}
		u, ok := a.units[id.Unit]
		if !ok {
			continue
		}
		if !(past && d.Force) && !a.movable(id, u) {
			stuck = append(stuck, id.String())
			continue
		}
		if (busy || gave) && !past {
			continue
		}
		gave = true
		if h.exclusive || past {
			h.phase = Stopping
			if !past {
				a.ops.handoffs[id] = &handoff{since: now}
			}
			out = append(out, Stop{Slot: id}, h.then(Record{Slot: id, Action: "release", Reason: "drained from " + a.cfg.Node + ": stop, then release"}))
		} else {
			a.ops.handoffs[id] = &handoff{since: now, releasing: true}
			out = append(out, Release{Slot: id, Session: a.session},
				Record{Slot: id, Action: "release", Reason: "drained from " + a.cfg.Node + ": released; its instance runs until another node holds the slot (at most " + handoffTimeout.String() + ")"})
		}
	}
	// Claims whose answer was lost: read their keys (a second apart).
	if len(a.ops.maybe) > 0 && !a.ops.checking {
		if now.Before(a.ops.checkAt) {
			at(a.ops.checkAt)
		} else {
			ids := make([]SlotID, 0, len(a.ops.maybe))
			for id := range a.ops.maybe {
				ids = append(ids, id)
			}
			sortSlots(ids)
			a.ops.checking = true
			out = append(out, CheckHeld{Slots: ids, Session: a.session})
		}
	}
	// The status: done only when nothing is held, as far as this node
	// knows and as every index it reads shows.
	held := map[string]bool{}
	for id := range a.held {
		held[id.String()] = true
	}
	for id := range a.ops.maybe {
		held[id.String()] = true
	}
	for name, v := range a.slots {
		for _, k := range v.byNode[a.cfg.Node] {
			held[SlotID{name, k}.String()] = true
		}
	}
	st := DrainStatus{Node: a.cfg.Node, Held: make([]string, 0, len(held)), Stuck: stuck}
	for s := range held {
		st.Held = append(st.Held, s)
	}
	sort.Strings(st.Held)
	st.Done = len(st.Held) == 0 || a.cfg.Faults.DrainDoneEarly
	if (a.ops.published == nil || !a.ops.published.equal(st)) && !a.ops.publishing {
		if now.Before(a.ops.publishRetry) {
			at(a.ops.publishRetry)
		} else {
			a.ops.publishing = true
			why := fmt.Sprintf("holds %d, %d stuck", len(st.Held), len(st.Stuck))
			if st.Done {
				why = "done: holds nothing"
			}
			out = append(out, PublishDrain{Status: st}, Record{Action: "drain-status", Reason: why})
		}
	}
	if !past {
		at(d.Deadline)
	}
	return out
}

// movable: a node other than this one may take slot id now, as this node
// sees the fleet: live, not draining, below the unit's max_per_node.
func (a *Agent) movable(id SlotID, u Unit) bool {
	if a.nodes == nil {
		return false
	}
	v := a.slots[id.Unit]
	for _, n := range a.nodes.Nodes {
		if n == a.cfg.Node {
			continue
		}
		if _, d := a.draining(n); d {
			continue
		}
		if v != nil && len(v.byNode[n]) >= max(1, u.MaxPerNode) {
			continue
		}
		if u.Placement != nil || !u.Resources.IsZero() {
			// Its constraints and capacity, as a ranking sees them.
			view := placement.View{}
			if v != nil {
				view.Holders = v.Holders
			}
			if !u.Resources.IsZero() {
				view.Reserved = a.reserved()
			}
			if !placement.Feasible(clusterUnit(u), a.nodes.infos()[a.nodes.positions()[n]], id.K, view).OK {
				continue
			}
		}
		return true
	}
	return false
}

// Refusal reads why a claim's transaction of n ops was refused, from the
// indexes of the ops that failed: notFresh, a Fresh claim's first op (its
// ClaimedKey's check-not-exists: the slot was claimed before); budget, a
// takeover's budget CAS (the last op) alone. The executor and the
// simulator build the same transaction and read its refusal here.
func (c Claim) Refusal(n int, failed []int) (notFresh, budget bool) {
	if len(failed) == 0 {
		return false, false
	}
	if c.Fresh && slices.Contains(failed, 0) {
		return true, false
	}
	if c.Takeover == nil || !c.Takeover.Logged {
		return false, false
	}
	for _, i := range failed {
		if i != n-1 {
			return false, false
		}
	}
	return false, true
}

// services is what the instances of u register as (Unit.Services; its
// name when it says none).
func (u Unit) services() []string {
	if s := strings.Fields(u.Services); len(s) > 0 {
		return s
	}
	return []string{u.Name}
}
