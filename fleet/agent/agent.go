package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/holdrule"
	"github.com/mariposa-sh/mariposa/schema"
)

// Unit is a cluster unit as this cut of the agent knows it.
type Unit struct {
	Name       string
	Count      int
	Exclusive  bool
	MaxPerNode int
	// Volumes: the unit has volumes that move with its slots (handoff =
	// "snapshot"): a claim restores before Start, a release hands off
	// first (volumes.go).
	Volumes bool
	// CopyEvery: the unit's volumes with replicas push a copy of the
	// holder's data to other nodes this often (the least interval of
	// them; 0: none): a running hold's PushCopies (volumes.go).
	CopyEvery time.Duration
	// Placement is the unit's placement block (constraints, affinities,
	// spreads, scheduler_algorithm; nil: none); Count, MaxPerNode and
	// Exclusive above override its own. Resources is what each slot
	// reserves on its node; Sticky: the unit's volumes keep data on the
	// node, so a slot prefers its previous holder (place.go, UnitOf).
	Placement *schema.Placement
	Resources placement.Reservation
	Sticky    bool
	// Reschedule: a service's restart.on_exhausted = "reschedule" (the
	// policy is Placement.Reschedule); Group: several services share the
	// slot and fail as one (reschedule.go; OnExhausted reads both).
	Reschedule, Group bool
	// Services are the services of its instances, space-separated, each
	// registered as <service>-<k> ("": the unit's name): a drain's
	// handoff waits for them to pass on the next holder (AwaitSuccessor).
	// A string, so that a Unit stays comparable.
	Services string
	// MaxStop is the longest its services' stop may take (drain, then
	// the stop signal's timeout): a takeover of a slot lost with its
	// node waits for it after stop_after (stopafter.go).
	MaxStop time.Duration
}

// SlotID names a slot: the key slots/<Unit>/<K>.
type SlotID struct {
	Unit string
	K    int
}

func (s SlotID) String() string { return fmt.Sprintf("%s/%d", s.Unit, s.K) }

// Key is the slot's lock key.
func (s SlotID) Key() string { return fmt.Sprintf("mariposa/slots/%s/%d", s.Unit, s.K) }

// IndexPrefix is the unit's index: what every node watches (with ?keys)
// instead of the slot keys, whose values it does not need.
func IndexPrefix(unit string) string { return "mariposa/held/" + unit + "/" }

// VacancyPrefix holds one key per unit (VacancyKey) that a release's
// transaction sets: a node idle in a unit (Idle) hears its index at
// IdlePace, and this key's watch, which answers only on releases, at once.
const VacancyPrefix = "mariposa/vacancy/"

// VacancyKey is unit's vacancy key.
func VacancyKey(unit string) string { return VacancyPrefix + unit }

// IdlePace is how often, at most, a node idle in a unit hears its index:
// the fills of a vacancy it will not claim. The vacancies themselves reach
// it at once: a release moves the unit's VacancyKey, an invalidation comes
// with a failing instance in the health watch (Refresh).
const IdlePace = time.Second

// IndexKey is the slot's entry in its unit's index while node holds it:
// locked by the holder's session in the claim's transaction (whose
// behaviour is delete, so an invalidation removes it with the slot key),
// deleted by the release's.
func (s SlotID) IndexKey(node string) string {
	return IndexPrefix(s.Unit) + strconv.Itoa(s.K) + "/" + node
}

// ReleasedKey marks, in the index, a slot its holder released (set by the
// release's transaction, deleted by the next claim's): a free slot without
// it was freed by an invalidation and is under Consul's lock delay.
func (s SlotID) ReleasedKey() string { return IndexPrefix(s.Unit) + strconv.Itoa(s.K) }

// ClaimedKey says the slot was claimed at least once, and by which node
// last: set to the claimer's name by every claim's transaction, never
// locked (an invalidation deletes the slot key and the index entry with
// the holder's session, not this: status reads the slot as lost with that
// node). A Fresh claim checks it does not exist: a slot never claimed is
// no takeover.
func (s SlotID) ClaimedKey() string { return cluster.ClaimedKey(s.Unit, s.K) }

// IndexView reads an answer of the watch on a unit's index (key names
// only, as ?keys gives them) into a view. Names it does not know are
// skipped.
func IndexView(unit string, index uint64, keys []string) *SlotsView {
	prefix := IndexPrefix(unit)
	by := map[int]Slot{}
	delays := map[int][]string{}
	var order []int
	for _, key := range keys {
		rest, ok := strings.CutPrefix(key, prefix)
		if !ok {
			continue
		}
		ks, node, held := strings.Cut(rest, "/")
		var after time.Time
		if !held {
			if k, until, ok := parseDelayKey(ks); ok {
				ks, after = k, until
			}
		}
		k, err := strconv.Atoi(ks)
		if err != nil || k < 0 || (held && node == "") {
			continue
		}
		sl, seen := by[k]
		if !after.IsZero() {
			// A reschedule's mark, beside the released mark or the
			// holder's entry: the slot's delay, and a key for the next
			// claim to delete.
			if !seen {
				order = append(order, k)
			}
			sl.K = k
			if after.After(sl.After) {
				sl.After = after
			}
			by[k] = sl
			delays[k] = append(delays[k], key)
			continue
		}
		if !seen {
			order = append(order, k)
		}
		sl.K = k
		if held {
			sl.Node, sl.ModifyIndex, sl.Released = node, index, false
		} else if sl.Node == "" {
			sl.Released = true
		}
		by[k] = sl
	}
	slots := make([]Slot, 0, len(order))
	for _, k := range order {
		slots = append(slots, by[k])
	}
	v := NewSlotsView(unit, index, slots)
	if len(delays) > 0 {
		v.delays = delays
	}
	return v
}

// Slot is one slot as the unit's index watch answered it (CLUSTER.md
// section 12, "Watches"): the index lists, per held slot, the holder's
// node in a key of its name, and a marker for a slot its holder released.
type Slot struct {
	K    int
	Node string // the holder; "" free
	// ModifyIndex, for a held slot: an index at which the hold was seen
	// (the index of the answer that showed it, never below the lock's).
	// For a free slot: above zero when the answer knows it was held and
	// freed without a release (its holder's session invalidated).
	ModifyIndex uint64
	// Released: the slot's holder released it. A free slot that was held
	// and is not released was freed by an invalidation, and Consul
	// refuses to lock it for the lock delay.
	Released bool
	// After: the slot was released by a reschedule (DelayKey): no claim
	// of it before this time (placement.NextDelay's delay after the
	// failure; the latest when the index shows several).
	After time.Time
}

// SlotsView is one answer of the watch on a unit's index, immutable once
// built: the simulator hands the same view to every node that gets the
// same answer, and the ranking it carries is computed once.
type SlotsView struct {
	Unit    string
	Index   uint64
	Slots   map[int]Slot
	Holders map[int]string // held slots -> node
	byNode  map[string][]int
	nodeOf  []string // by slot number: the holder, "" free
	dense   []Slot   // Slots by slot number (the zero Slot where none)
	// delays: per slot, the reschedules' marks the index shows
	// (DelayKey), which the next claim deletes.
	delays map[int][]string
}

// DelayKeys are the reschedules' marks of slot k the view shows
// (DelayKey; Slot.After is the latest's time).
func (v *SlotsView) DelayKeys(k int) []string { return v.delays[k] }

// slot is Slots[k] without a map lookup (a node reads it for every slot
// it holds at every answer).
func (v *SlotsView) slot(k int) Slot {
	if k < 0 || k >= len(v.dense) {
		return Slot{}
	}
	return v.dense[k]
}

// holder is the node holding slot k, "" none.
func (v *SlotsView) holder(k int) string {
	if k < 0 || k >= len(v.nodeOf) {
		return ""
	}
	return v.nodeOf[k]
}

// NewSlotsView builds a view from a watch's answer.
func NewSlotsView(unit string, index uint64, slots []Slot) *SlotsView {
	v := &SlotsView{Unit: unit, Index: index, Slots: map[int]Slot{}, Holders: map[int]string{}, byNode: map[string][]int{}}
	for _, s := range slots {
		v.Slots[s.K] = s
		if s.Node != "" && s.K >= 0 {
			v.Holders[s.K] = s.Node
			v.byNode[s.Node] = append(v.byNode[s.Node], s.K)
			if s.K >= len(v.nodeOf) {
				v.nodeOf = append(v.nodeOf, make([]string, s.K+1-len(v.nodeOf))...)
			}
			v.nodeOf[s.K] = s.Node
		}
		if s.K >= 0 && s.K < 1<<20 {
			if s.K >= len(v.dense) {
				v.dense = append(v.dense, make([]Slot, s.K+1-len(v.dense))...)
			}
			v.dense[s.K] = s
		}
	}
	return v
}

// NodesView is the live fleet nodes as a watch answered, immutable.
type NodesView struct {
	Index uint64
	Nodes []string
	// Failing: the fleet's members whose instance is not passing (what
	// the health watch answers); a name new here makes the agent re-read
	// at once the units that node held (Refresh).
	Failing []string
	// Info: each node's attributes and capacity by name (the members'
	// catalog answer: node meta, the registration's meta); nil or a name
	// missing: its name alone.
	Info map[string]placement.NodeInfo
	pos  map[string]int
	info []placement.NodeInfo
}

// infos are Nodes as placement sees them: in the fleet, live, eligible
// (built once).
func (v *NodesView) infos() []placement.NodeInfo {
	if v.info == nil {
		v.info = make([]placement.NodeInfo, len(v.Nodes))
		for i, n := range v.Nodes {
			in, ok := v.Info[n]
			if !ok {
				in.Eligible = true
			}
			in.Name, in.Fleet, in.Live = n, true, true
			v.info[i] = in
		}
	}
	return v.info
}

// positions maps each node to its first place in Nodes (built once).
func (v *NodesView) positions() map[string]int {
	if v.pos == nil {
		v.pos = make(map[string]int, len(v.Nodes))
		for i, n := range v.Nodes {
			if _, dup := v.pos[n]; !dup {
				v.pos[n] = i
			}
		}
	}
	return v.pos
}

// Inputs.
type (
	// Tick: a timer the agent asked for has fired (or any wake-up).
	Tick struct{}
	// SlotsAnswer: a new answer of the watch on a unit's slots.
	SlotsAnswer struct{ View *SlotsView }
	// NodesAnswer: a new answer of the watch on the live fleet nodes.
	NodesAnswer struct{ View *NodesView }
	// UnitsAnswer: the units this node runs its part of.
	UnitsAnswer struct {
		Units []Unit
		// Stopping: the node is stopping (mariposa stopped): no units,
		// and the releases say so.
		Stopping bool
	}
	// SessionCreated answers CreateSession (ID "" with Err: failed).
	SessionCreated struct {
		ID  string
		Err error
	}
	// SessionLost: the node's session is gone (invalidated).
	SessionLost struct{}
	// SessionRenewed: a renewal of the session sent at Sent was answered
	// (the session is alive). Its absence for TTL/2 + stop_after stops
	// the instances of non-exclusive units with a stop_after (cut off
	// from Consul: stopafter.go).
	SessionRenewed struct{ Sent time.Time }
	// ClaimDone answers Claim. Lost: no answer came back (it may have
	// been applied).
	ClaimDone struct {
		Slot  SlotID
		OK    bool
		Lost  bool
		Index uint64 // the key's ModifyIndex after the lock
		// LockDelay: refused for the key's lock delay.
		LockDelay bool
		// Taken: refused because another session holds the key (the
		// view that showed it free is stale).
		Taken bool
		// Budget: refused because the takeover budget's CAS was (ops.go).
		Budget bool
		// NotFresh: a Fresh claim refused because the slot was claimed
		// before (its ClaimedKey exists).
		NotFresh bool
		// Failed: refused by its check of the slot's failed mark alone
		// (reset.go).
		Failed bool
	}
	// ReleaseDone answers Release.
	ReleaseDone struct {
		Slot SlotID
		OK   bool
	}
	// ConfirmDone answers Confirm sent at Sent: which slots the session
	// still holds; Err: no answer (cut off, no leader).
	ConfirmDone struct {
		Sent time.Time
		Held map[SlotID]bool
		Err  error
		// NoLeader: the failure is evidence that the servers could not
		// reach a Raft leader (internal/holdrule), not a timeout.
		NoLeader bool
	}
	// InstanceStarted and InstanceExited come from the node's supervisor.
	InstanceStarted struct{ Slot SlotID }
	InstanceExited  struct{ Slot SlotID }
)

// Actions.
type (
	// CreateSession: create the node's session (answer: SessionCreated).
	CreateSession struct{}
	// Claim: lock the slot key with the session, the value naming Node.
	Claim struct {
		Slot    SlotID
		Session string
		Node    string
		// Takeover: the claim takes over a lost slot and spends the
		// budget in its transaction (ops.go). Released: the view showed
		// the slot released by its holder, and the transaction checks
		// that it still is (a slot lost since is a takeover).
		Takeover *TakeoverCAS
		Released bool
		// Fresh: with the controls, a slot this node never saw held and
		// the index shows neither held nor released may never have been
		// held at all (a new unit, a raised count): the transaction checks
		// that its ClaimedKey does not exist (check-not-exists, its first
		// op) and spends no budget. A key that exists refuses it
		// (ClaimDone.NotFresh), and the slot is claimed as a takeover.
		Fresh bool
		// CheckFailed: the transaction checks that the slot's failed
		// mark (cluster.FailedKey) does not exist (reset.go; FailedOp).
		CheckFailed bool
		// Delays: the reschedules' marks of the slot its view showed
		// (DelayKey, past by now): the transaction deletes them and the
		// slot's DelayGuardKey. With none, it checks that the guard does
		// not exist: a refusal is Taken, a newer view first.
		Delays []string
		// From: the slot's last holder as this node knows it ("" none
		// known): the claim's audit record names it.
		From string
	}
	// Release: unlock the slot key (answer: ReleaseDone). Failed: the
	// slot failed (reset.go): the same transaction sets its failed mark.
	Release struct {
		Slot    SlotID
		Session string
		Failed  *cluster.FailedRecord
		// Reschedule: the slot moves (reschedule.go), or fails once its
		// history is exhausted (Failed too): the same transaction writes
		// the node's penalty and the slot's history.
		Reschedule *Rescheduled
		// Audit: the record of the decision this release carries out,
		// made when the instance was told to stop (records.go); zero:
		// none.
		Audit Record
	}
	// Confirm: one consistent read of the held exclusive keys.
	Confirm struct {
		Slots   []SlotID
		Session string
	}
	// Start the slot's instance with its fencing token, at Version (the
	// unit's deployment's target for the slot; "" the unit has none).
	// Volumes says how its volumes were readied when it was more than
	// finding them in place (RestoreDone.Note; the supervisor check
	// carries it, supervisor.SlotInfo.Volumes).
	Start struct {
		Slot    SlotID
		Index   uint64
		Session string
		Version string
		Volumes string
	}
	// Stop the slot's instance (Kill: at once).
	Stop struct {
		Slot SlotID
		Kill bool
	}
	// Wake: call Step with Tick at At.
	Wake struct{ At time.Time }
	// Refresh: ask these units' index watches now, not at their pace
	// (see Idle): a node that failed held slots of them, so their
	// answers are about to show vacancies.
	Refresh struct{ Units []string }
	// Record: an audit record of a decision (in the real agent, in the
	// transaction that carries it out).
	Record struct {
		Slot   SlotID
		Action string
		Reason string
		// From and To: what moved, as website/operations.md's table
		// says for the action (a claim: the previous holder; a
		// rollout's records: the version). The executor fills what
		// it knows (a claim's To, a release's From and To).
		From, To string
		// Deployment: a deployment's record (moveRecords) names the
		// deployment as its service, and the unit as its slot.
		Deployment string
		// Deferred: a decision to stop and then release, which the
		// slot's Release carries (Release.Audit; records.go).
		Deferred bool
	}
)

// Phase is a held slot's place in its life (doc.go).
type Phase int

// The phases.
const (
	Claiming Phase = iota
	Starting
	Running
	Stopping
	Releasing
)

// maxInflight bounds the confirmations on their way at once.
const maxInflight = 3

var phaseNames = [...]string{"claiming", "starting", "running", "stopping", "releasing", "updating", "restoring", "handing-off"}

func (p Phase) String() string { return phaseNames[p] }

type held struct {
	phase     Phase
	exclusive bool
	index     uint64    // the fencing token
	sent      time.Time // when the claim was sent
	acked     time.Time // when its answer came
	confirmed time.Time // send time of the last read that showed the hold
	lost      bool      // the hold ended: stop without releasing
	orphan    bool      // non-exclusive, session lost: keep running
	// cut: an orphan of a lost session (not a drain's), claimed again
	// when its slot shows free (stopafter.go); renewed: that session's
	// last renewal (its stop_after runs from it); reclaim: its claim with
	// the new session is on its way (its instance keeps running).
	cut     bool
	renewed time.Time
	reclaim bool
	retry   time.Time // its claim back not before
	// unsure: its claim back got no answer, at this view index: a newer
	// view that shows the slot this node's holds it under the new
	// session, unknown (a stray): released (unclaiming), then claimed
	// back again.
	unsure     uint64
	unclaiming bool
	rec        *unitRec // its unit
	// seen and seenIndex: the view and token the last look at the view
	// found this hold not taken by another session with.
	seen      *SlotsView
	seenIndex uint64
	volReady  bool // its volumes were readied for this term (volumes.go)
	// prev: the slot's previous holder as this node saw it when it
	// claimed ("" unknown; kept for a Sticky unit, place.go): its
	// Restore's Prev.
	prev    string
	volumes bool // its unit had volumes when it was claimed
	// copyAt: when its next periodic copy is due (zero: not planned
	// yet); copying: a PushCopies is on its way (volumes.go).
	copyAt  time.Time
	copying bool

	// release: the decision its Release carries (records.go).
	release Record
}

// Faults break the mechanism on purpose, for the simulator's mutation
// checks only: each must make an invariant fail.
type Faults struct {
	NoWatchdog bool // an exclusive holder never kills an unconfirmed instance
	NoToken    bool // a holder updates its instance without a rollout token
	// TokenHerd: every waiting holder asks for a free rollout token at
	// once, its turn or not (tokens.go).
	TokenHerd bool
	NoRevert  bool // the judge fails a deployment without its auto_revert
	// IgnoreUnhealthy: a break within min_healthy_time does not start the
	// time over (InstanceUnhealthy ignored).
	IgnoreUnhealthy bool
	// NoProgressSkew: the judge fails a deployment on progress_deadline
	// without ProgressSkew's margin (it judges ProgressSkew ahead).
	NoProgressSkew bool
	// The controls (ops.go): claims ignore pauses; takeovers ignore the
	// storm brake; a drain says done as soon as it starts.
	IgnorePause, IgnoreBrake, DrainDoneEarly bool
	// IgnoreFailed: claims ignore the slots control/ shows failed;
	// NoRestartHold: a pause of scope all holds no restart.
	IgnoreFailed, NoRestartHold bool
	// Reschedules (reschedule.go): the history never exhausts; the
	// penalized node neither knows its penalty before the watch on
	// penalty/ says it nor steps aside; rankings leave the penalties out.
	IgnoreAttempts, NoStepAside, IgnorePenalties bool
	// NoRescheduleDelay: a rescheduled slot is claimed without waiting
	// for its delay (Slot.After).
	NoRescheduleDelay bool
	// LogEveryTakeover: every takeover writes the budget's log, none
	// rides on a fresh one of its lost node.
	LogEveryTakeover bool
	// RefusedWaitsAnyway: a takeover the budget refused always waits for
	// a newer answer of control/, even when the view already has the
	// log that beat it (the rule before CI's TestFleetStormBrake).
	RefusedWaitsAnyway bool
	// ForgetOnlyOnLift: a node forgets the vanishings only when it sees
	// the brake it saw engaged lifted, not when control/storm-lifted
	// moves (a node cut off during the storm engages it again after the
	// resume).
	ForgetOnlyOnLift bool
	// Volumes (volumes.go): the instance starts with its restore, not
	// after it; the release goes without waiting for the handoff.
	StartBeforeRestore, ReleaseBeforeHandoff bool
	// ProbeConfirms: a probe that found no leader confirms the holds, as
	// if no bound applied (noleader.go).
	ProbeConfirms bool
}

// Config is a node's agent.
type Config struct {
	Node      string
	Step      time.Duration // rank spacing (placement.DefaultStep)
	LockDelay time.Duration // the session's lock delay (1 s)
	Seed      uint64        // the claim jitter's source
	// Detect is Consul's failure-detection floor D (internal/holdrule):
	// while confirmations fail with no-leader evidence, an exclusive hold
	// lasts D + lock_delay/2 from its last confirmation. 0: the strict
	// rule (lock_delay/2) always.
	Detect time.Duration
	// Rank ranks the free slots of a unit (DefaultRank when nil). It must
	// be a pure function of its arguments: the simulator shares one
	// result among the nodes that have the same views.
	Rank func(u Unit, v *SlotsView, nodes *NodesView, free []int) Ranking
	// RankWith, when set, is used instead of Rank, with the placement
	// inputs beyond the views (place.go; DefaultRankWith when both are
	// nil). The same rule: a pure function of its arguments.
	RankWith func(u Unit, v *SlotsView, nodes *NodesView, free []int, x Extra) Ranking
	Faults   Faults
	// Control: the executor watches control/ (ControlAnswer): pauses,
	// drains, the storm brake and the takeover budget apply (ops.go), and
	// nothing is claimed before the first answer.
	Control bool
	// Warm, when set, starts the agent holding these slots under
	// Session, their instances running and confirmed at At (a simulation
	// that starts from a placed fleet).
	Warm *Warm
	// Adopt, when set, starts the agent from what the previous image
	// handed over in an upgrade in place (adopt.go).
	Adopt *Adopt
	// TTL is the session's TTL (renewed every TTL/2): a non-exclusive
	// unit's stop_after counts from TTL/2 after the last renewal, and a
	// claimant waits for it (stopafter.go). 0: stop_after is not applied.
	TTL time.Duration
}

// Warm is a placed start: the session and the held slots' fencing tokens.
type Warm struct {
	Session   string
	At        time.Time
	Held      map[SlotID]uint64
	Exclusive map[string]bool // by unit
}

// Agent is one node's fleet state. Only Step changes it.
type Agent struct {
	cfg     Config
	rng     *rand.Rand
	session string
	asking  bool // CreateSession in flight
	// adoptWait: adopted (adopt.go), no UnitsAnswer yet.
	adoptWait bool
	// stopping: the last UnitsAnswer said the node stops.
	stopping bool
	// sessionRetry: after a failed CreateSession, the next not before.
	sessionRetry time.Time
	// renewed: the send time of the session's last answered renewal
	// (its creation's answer at first): stop_after (stopafter.go).
	renewed     time.Time
	units       map[string]Unit
	slots       map[string]*SlotsView
	nodes       *NodesView
	held        map[SlotID]*held
	heldSorted  []SlotID // held's IDs in order; nil when held changed
	holdsGen    uint64   // moved by every change of the holds (heldChanged)
	holdsMemo   holdsMemo
	heldCounted bool // the units' nHeld count held as it is
	// inflight: confirmations sent and not answered. They are sent every
	// lock_delay/5 whether or not the last one came back (each carries
	// its send time, so a slow answer costs nothing), up to maxInflight.
	inflight    int
	lastConfirm time.Time
	// rule and failed: the hold rule and the confirmations that failed
	// since the last one that came back.
	rule   holdrule.Rule
	failed []holdrule.Attempt
	// strays: when a stray's release was last tried and at which view; it
	// is tried again once a newer view still shows it, or a second later
	// (a release refused for want of a leader changes no view).
	strays map[SlotID]strayTry
	wakeAt time.Time
	// dirty: units whose claims and strays are looked at again in this
	// step (their view changed or their claim time came).
	dirty     map[string]bool
	dirtyList []string // dirty's units, in the order marked (sorted when looked at)
	// waitAt: units with a claim timed for later.
	waitAt map[string]time.Time
	// waitMin, when waitMinOK, is the earliest of waitAt (setWait and
	// delWait keep it, or say it must be looked for again).
	waitMin   time.Time
	waitMinOK bool
	// recs: what this node knows per unit (one lookup, not one per map).
	recs map[string]*unitRec
	// refused: slots whose claim another session's hold refused, with the
	// index of the view that showed them free: not claimed again until a
	// newer view.
	refused map[SlotID]uint64
	// ownLost: slots this node held until it lost them (its session, its
	// watchdog, a release refused while cut off): claimed back as its own,
	// no takeover (stopafter.go), until a view shows them another's or
	// released.
	ownLost map[SlotID]bool
	// dep: the units' deployments (deploy.go); nil until one is heard of.
	dep *deployState
	// ops: pause, drain, the storm brake and the takeover budget (ops.go).
	ops opsState
	// volBackoff: slots whose restore failed here, not claimed again
	// before (volumes.go).
	volBackoff map[SlotID]time.Time
	volRetry   map[SlotID]volRetry // handoffs to send again
	copies     bool                // a unit has CopyEvery (volumes.go)
	// rs: the failed slots (reset.go); pq: the pause's held restarts and
	// the node's queue (intents.go).
	rs resetState
	pq pauseQueue
	// place: penalties, previous holders, reservations (place.go).
	place placeState
}

// unitRec is a unit as a.units and a.slots have it, and this node's
// vacancies, ranking and invalidated slots of it.
type unitRec struct {
	unit Unit
	ok   bool // in a.units
	view *SlotsView
	// vacant: by slot.
	vacant map[int]vacancy
	// asg: the last ranking's places of this node (hasAsg: there is one).
	asg    assignment
	hasAsg bool
	// rerank: its claim time came: ranked again even if its free slots
	// only shrank.
	rerank bool
	// invalidated: free slots this node saw held and then free without a
	// release (the index cannot say so: the holder's keys are deleted
	// with its session), until a view shows them held or released.
	// It keeps the holder that was lost ("?" when not known).
	invalidated map[int]string
	// wait mirrors waitAt[unit] (hasWait: set); nHeld counts the holds of
	// the unit (kept by heldIDs).
	wait    time.Time
	hasWait bool
	nHeld   int
}

func (a *Agent) rec(name string) *unitRec {
	r := a.recs[name]
	if r == nil {
		r = &unitRec{view: a.slots[name]}
		r.unit, r.ok = a.units[name]
		a.recs[name] = r
	}
	return r
}

// setWait sets unit's claim time.
func (a *Agent) setWait(r *unitRec, unit string, t time.Time) {
	old, had := r.wait, r.hasWait
	a.waitAt[unit] = t
	r.wait, r.hasWait = t, true
	switch {
	case !a.waitMinOK:
	case len(a.waitAt) == 1:
		a.waitMin = t
	case t.Before(a.waitMin):
		a.waitMin = t
	case had && !old.After(a.waitMin) && t.After(old):
		// The earliest moved later: which is earliest now is not known.
		a.waitMinOK = false
	}
}

// delWait clears unit's claim time.
func (a *Agent) delWait(r *unitRec, unit string) {
	old, had := r.wait, r.hasWait
	if !had {
		return
	}
	delete(a.waitAt, unit)
	r.wait, r.hasWait = time.Time{}, false
	if a.waitMinOK && !old.After(a.waitMin) {
		a.waitMinOK = false
	}
}

type strayTry struct {
	index uint64
	at    time.Time
}

type vacancy struct {
	since  time.Time
	jitter float64
	// notBefore: a claim refused for the lock delay is not tried again
	// before this.
	notBefore time.Time
}

// assignment is this node's place for each free slot of a unit as one
// ranking said: only its own places are kept (a ranking lists every
// feasible node for every free slot, and may be shared).
type assignment struct {
	slotsIdx, nodesIdx uint64
	count              int
	ext                string // Extra.Key
	free               []int
	mine               map[int]Place
	// of: per slot of mine, how many nodes may hold it (its feasible
	// nodes: the queue's "rank 1 of 3").
	of map[int]int
	in bool // this node was among the nodes ranked
}

// Ranking is where each feasible node stands for each free slot of a
// unit (placement.Assign's outcome, kept small: a node reads only its own
// place).
type Ranking struct {
	pos    map[string]int  // node -> its position in the nodes view
	places map[int][]Place // per free slot, by position; Rank -1: not feasible
}

// Place is one feasible node's standing for a slot: its first-round rank
// and its rank by rendezvous hash alone (ClaimDelay, SecondRoundDelay).
type Place = placement.Place

// Of returns node's place for slot; false: not feasible there.
func (r Ranking) Of(slot int, node string) (Place, bool) {
	i, ok := r.pos[node]
	ps := r.places[slot]
	if !ok || i >= len(ps) || ps[i].Rank < 0 {
		return Place{}, false
	}
	return ps[i], true
}

// New returns a node's agent.
func New(cfg Config) *Agent {
	if cfg.Step <= 0 {
		cfg.Step = placement.DefaultStep
	}
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = time.Second
	}
	a := &Agent{rule: holdrule.Rule{LockDelay: cfg.LockDelay, Detect: cfg.Detect}, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x61676e74)), units: map[string]Unit{},
		slots: map[string]*SlotsView{}, held: map[SlotID]*held{},
		dirty: map[string]bool{}, waitAt: map[string]time.Time{},
		recs: map[string]*unitRec{}, strays: map[SlotID]strayTry{}, refused: map[SlotID]uint64{}, ownLost: map[SlotID]bool{}}
	if w := cfg.Warm; w != nil {
		a.session = w.Session
		for id, idx := range w.Held {
			a.held[id] = &held{phase: Running, exclusive: w.Exclusive[id.Unit], index: idx, sent: w.At, acked: w.At, confirmed: w.At, volReady: true}
			a.heldChanged()
		}
	}
	if cfg.Adopt != nil {
		a.adopt(cfg.Adopt)
	}
	return a
}

func (a *Agent) dirtyAll() {
	for u := range a.units {
		a.markDirty(u)
	}
}

// markDirty: unit's claims and strays are looked at again in this step.
func (a *Agent) markDirty(unit string) {
	if !a.dirty[unit] {
		a.dirty[unit] = true
		a.dirtyList = append(a.dirtyList, unit)
	}
}

// Session is the node's session ("" none).
func (a *Agent) Session() string { return a.session }

// Held lists the held slots with their phases, in order.
func (a *Agent) Held() map[SlotID]Phase {
	out := map[SlotID]Phase{}
	for id, h := range a.held {
		out[id] = h.phase
	}
	return out
}

// Step takes one input at now and returns what to do.
func (a *Agent) Step(now time.Time, in any) []any {
	switch in.(type) {
	case Tick, NodesAnswer:
		// Neither touches a hold.
	case SlotsAnswer:
		// Below.
	default:
		a.holdsGen++
	}
	out, done := a.stepOps(now, in)
	if done || a.stepPlace(in) {
		return a.reconcile(now, out)
	}
	switch in := in.(type) {
	case Tick:
		for u, t := range a.waitAt {
			if !now.Before(t) {
				a.markDirty(u)
				a.rec(u).rerank = true
			}
		}
	case UnitsAnswer:
		a.adoptWait, a.stopping = false, in.Stopping
		a.units = map[string]Unit{}
		a.copies = false
		for _, u := range in.Units {
			a.units[u.Name] = u
			a.copies = a.copies || u.CopyEvery > 0
		}
		for name, r := range a.recs {
			old := r.unit
			r.unit, r.ok = a.units[name]
			if old != r.unit {
				r.hasAsg = false // its placement may differ
			}
		}
		a.dirtyAll()
	case SlotsAnswer:
		r := a.rec(in.View.Unit)
		if a.heldIDs(); r.nHeld > 0 {
			a.holdsGen++ // the holds' loop reads the unit's view
		}
		a.noteInvalidated(r, r.view, in.View)
		a.noteOwnLost(in.View)
		a.notePrevious(a.units[in.View.Unit], r.view, in.View)
		a.slots[in.View.Unit] = in.View
		r.view = in.View
		a.markDirty(in.View.Unit)
	case NodesAnswer:
		// Not a reason to rank again at once: the units with free slots
		// are ranked with it at their next answer or claim time (a node
		// ahead that is gone costs at most one rank's delay). Ranking
		// every unit with a vacancy at every failure or return of a node
		// was most of a 1,000-node fleet's work after a loss.
		if units := a.refreshFor(a.nodes, in.View); len(units) > 0 {
			out = append(out, Refresh{Units: units})
		}
		// This node back among the live (its checks passing again, after
		// a freeze or a cut): the free slots were ranked without it, and
		// no answer may come to rank them again (nothing else changes).
		back := !liveIn(a.nodes, a.cfg.Node) && liveIn(in.View, a.cfg.Node)
		a.nodes = in.View
		if back {
			a.dirtyAll()
		}
	case SessionCreated:
		a.asking = false
		if in.Err == nil {
			a.session = in.ID
			a.renewed = now
			a.dirtyAll()
		} else {
			// Not at once again (no leader, the agent away): a second on.
			a.sessionRetry = now.Add(time.Second)
		}
	case SessionLost:
		out = a.loseSession(out)
	case SessionRenewed:
		if in.Sent.After(a.renewed) {
			a.renewed = in.Sent
		}
	case ClaimDone:
		h := a.held[in.Slot]
		if h != nil && h.reclaim {
			out = a.reclaimDone(now, in, h, out)
			break
		}
		if h == nil || h.phase != Claiming {
			break
		}
		if !in.OK {
			// Refused, or no answer: free again as far as this node
			// knows; a claim applied whose answer was lost shows up as a
			// stray in the next view and is released.
			delete(a.held, in.Slot)
			a.heldChanged()
			a.markDirty(in.Slot.Unit)
			if in.Taken {
				// Refused: another session holds it, so the view that
				// showed it free is stale. Not again on that view (a
				// tight loop of refused claims); ask for a fresh one.
				if v := a.slots[in.Slot.Unit]; v != nil {
					a.refused[in.Slot] = v.Index
				}
				out = append(out, Refresh{Units: []string{in.Slot.Unit}})
			}
			// Refused for the lock delay, or with no answer (no leader,
			// cut off, lost: a minority-side node retried at once,
			// hundreds of claims a second): not again for a tenth of the
			// lock delay.
			if in.LockDelay || !in.Taken && !in.Budget && !in.NotFresh {
				vs := a.vacantOf(in.Slot.Unit)
				v := vs[in.Slot.K]
				if v.since.IsZero() {
					v = vacancy{since: now, jitter: a.rng.Float64()}
				}
				v.notBefore = now.Add(a.cfg.LockDelay / 10)
				vs[in.Slot.K] = v
			}
			break
		}
		delete(a.ownLost, in.Slot)
		h.index, h.confirmed, h.acked, h.phase = in.Index, h.sent, now, Starting
		out = a.claimed(now, in.Slot, h, out) // its record went with the claim (records.go)
	case ReleaseDone:
		if h := a.held[in.Slot]; h != nil && h.unclaiming {
			h.unclaiming = false
			if in.OK {
				h.unsure = 0
			}
			a.markDirty(in.Slot.Unit)
			break
		}
		if h := a.held[in.Slot]; h != nil && h.phase == Releasing {
			if !in.OK {
				a.ownLost[in.Slot] = true // perhaps still ours; perhaps lost (cut off)
				// Refused: the view that showed it ours may be stale (a
				// stray of a session since lost, released again each
				// second for good while the view stood still): a fresh one.
				out = append(out, Refresh{Units: []string{in.Slot.Unit}})
			}
			delete(a.held, in.Slot)
			a.heldChanged()
			a.markDirty(in.Slot.Unit)
			if v := a.slots[in.Slot.Unit]; v != nil && in.OK {
				// The view from before the release still shows the
				// slot held by this node: not a stray to release again
				// (a second release Consul refuses, found by the
				// executor on real Consul), unless a second passes with
				// no newer view.
				a.strays[in.Slot] = strayTry{index: v.Index, at: now}
			}
		}
	case ConfirmProbed:
		a.probed(in) // noleader.go
	case ConfirmDone:
		a.inflight = max(0, a.inflight-1)
		if in.Err != nil {
			kind := holdrule.Unproven
			if in.NoLeader {
				kind = holdrule.NoLeader
			}
			a.failed = append(a.failed, holdrule.Attempt{Sent: in.Sent, Kind: kind})
			break
		}
		// Failures sent before this read say nothing of the holds it
		// confirms, and those it does not show end below.
		a.failed = slices.DeleteFunc(a.failed, func(f holdrule.Attempt) bool { return !f.Sent.After(in.Sent) })
		// In slot order: the actions' order is the trace's (a map's order
		// made the same seed give different traces across runs).
		for _, id := range a.heldIDs() {
			h := a.held[id]
			if !h.exclusive || h.lost || h.phase == Claiming || h.phase == Releasing || h.phase == HandingOff {
				continue // (not among those confirmed)
			}
			if in.Held[id] {
				if in.Sent.After(h.confirmed) {
					h.confirmed = in.Sent
				}
			} else if !h.acked.IsZero() && !h.acked.After(in.Sent) {
				// The read was sent after the claim's answer came and
				// does not show the hold: it has ended. (A read sent
				// before that may have been served before the claim.)
				out = a.lose(id, h, "slot key not held by this node's session", out)
			}
		}
	case DeployAnswer, InstanceHealthy, InstanceUnhealthy, TokenDone, ReturnDone, PublishDone, MoveDone:
		out = a.stepDeploy(now, in, out)
	case RestoreDone, HandoffDone, CopiesDone:
		out = a.stepVolumes(now, in, out)
	case InstanceFailed:
		out = a.stepFail(now, in, out)
	case RestartHeld, IntentsPublished:
		out = a.stepQueue(now, in, out)
	case InstanceStarted:
		if h := a.held[in.Slot]; h != nil && (h.phase == Starting || h.phase == Updating) {
			h.phase = Running
		}
	case InstanceExited:
		h := a.held[in.Slot]
		if h == nil {
			break
		}
		if h.lost || h.orphan {
			delete(a.held, in.Slot)
			a.heldChanged()
			// If Consul still says this session holds it, the next look
			// finds a stray and releases it.
			a.markDirty(in.Slot.Unit)
			break
		}
		if h.phase == Stopping {
			out = a.exited(now, in.Slot, h, out)
		}
	default:
		panic(fmt.Sprintf("agent: unknown input %T", in))
	}
	return a.reconcile(now, out)
}

// refreshFor: the units whose index (as this node last read it) shows
// slots held by a node that the new answer shows failing and the old did
// not. Their vacancies are about to appear: a node that hears the unit
// at an idle pace asks it now (the health watch is its prompt signal).
func (a *Agent) refreshFor(old, v *NodesView) []string {
	if old == nil || len(v.Failing) == 0 {
		return nil
	}
	var fresh []string
	for _, n := range v.Failing {
		if !slices.Contains(old.Failing, n) {
			fresh = append(fresh, n)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	var units []string
	for name, sv := range a.slots {
		for _, n := range fresh {
			if len(sv.byNode[n]) > 0 {
				units = append(units, name)
				break
			}
		}
	}
	sort.Strings(units)
	return units
}

// heldOf: the held slots of unit (r its record), in order.
func (a *Agent) heldOf(r *unitRec, unit string) []SlotID {
	ids := a.heldIDs()
	if r.nHeld == 0 {
		return nil
	}
	i := sort.Search(len(ids), func(i int) bool { return ids[i].Unit >= unit })
	return ids[i : i+r.nHeld]
}

// Idle says whether this node may hear unit's index at a slow pace (at
// most once per within) rather than at once: it has no claim of the unit
// on its way or due within within, and its view shows no stray of it. A
// holder needs no prompt answer: its confirmations read the slot key
// itself, and with max_per_node it claims nothing more of the unit. A node far down a vacancy's ranking cannot claim before
// its claim time anyway; a new vacancy from a failed node comes with a
// Refresh (the health watch), and the pace is lifted as its claim time
// nears, so it claims on a fresh view. A stale view costs a refused
// claim or time, never a second holder: the lock decides.
func (a *Agent) Idle(unit string, now time.Time, within time.Duration) bool {
	if a.session == "" {
		return false
	}
	r := a.rec(unit)
	if r.hasWait && r.wait.Sub(now) <= within {
		return false
	}
	if v := r.view; v != nil && len(v.byNode[a.cfg.Node]) > 0 {
		return false
	}
	for _, id := range a.heldOf(r, unit) {
		if a.held[id].phase == Claiming {
			// Its answer may be lost: the view shows the stray.
			return false
		}
	}
	return true
}

func (a *Agent) vacantOf(unit string) map[int]vacancy {
	r := a.rec(unit)
	if r.vacant == nil {
		r.vacant = map[int]vacancy{}
	}
	return r.vacant
}

// noteInvalidated keeps, across answers, which free slots were freed
// without a release.
func (a *Agent) noteInvalidated(r *unitRec, old, v *SlotsView) {
	inv := r.invalidated
	for k := range inv { // (nil, or not empty: see below)
		if s := v.slot(k); s.Node != "" || s.Released {
			delete(inv, k)
		}
	}
	if inv != nil && len(inv) == 0 {
		inv, r.invalidated = nil, nil // an empty map costs its range
	}
	if old == nil {
		return
	}
	for k, n := range old.nodeOf {
		if n == "" || v.holder(k) != "" {
			continue
		}
		if s := v.slot(k); !s.Released {
			if inv == nil {
				inv = map[int]string{}
				r.invalidated = inv
			}
			inv[k] = n
		}
	}
}

func (a *Agent) loseSession(out []any) []any {
	a.session, a.inflight, a.failed = "", 0, nil
	for _, id := range a.heldIDs() { // in slot order, as the trace needs
		h := a.held[id]
		if h.phase != Claiming {
			a.noteLostOwn(id) // (a release on its way: its answer is dropped)
		}
		switch {
		case h.phase.noInstance():
			delete(a.held, id)
			a.heldChanged()
		case h.exclusive:
			out = a.lose(id, h, "session lost", out)
		default:
			h.orphan, h.cut, h.renewed, h.reclaim = true, true, a.renewed, false
		}
	}
	return out
}

// lose ends a hold: the instance is killed, the key is not released (it
// is not this node's any more).
func (a *Agent) lose(id SlotID, h *held, why string, out []any) []any {
	if h.lost {
		return out
	}
	h.lost = true
	a.noteLostOwn(id)
	if h.phase.noInstance() {
		delete(a.held, id)
		a.heldChanged()
		if h.phase == Restoring || h.phase == HandingOff {
			// Still this session's in Consul, maybe: the next look
			// finds the stray and releases it (volumes.go).
			a.markDirty(id.Unit)
			out = append(out, Record{Slot: id, Action: "lost", Reason: why})
		}
		return out
	}
	h.phase = Stopping
	return append(out, Stop{Slot: id, Kill: true}, Record{Slot: id, Action: "lost", Reason: why})
}

// reconcile is everything that follows from the state at now.
func (a *Agent) reconcile(now time.Time, out []any) []any {
	var wake time.Time
	at := func(t time.Time) {
		// A time already come is looked at in this step, or cannot be
		// until an input changes something (no session yet).
		if !t.After(now) {
			return
		}
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	if a.session == "" && !a.asking {
		if now.Before(a.sessionRetry) {
			at(a.sessionRetry)
		} else {
			a.asking = true
			out = append(out, CreateSession{})
		}
	}

	out = a.reconcileOps(now, out, at)

	// The holds.
	ids := a.heldIDs()
	var confirm []SlotID
	if m := a.holdsMemo; m.ok && m.gen == a.holdsGen && (m.until.IsZero() || now.Before(m.until)) {
		confirm = m.confirm
		if !m.until.IsZero() {
			at(m.until)
		}
		ids = nil
	}
	acted, until := len(out), time.Time{}
	for _, id := range ids {
		h := a.held[id]
		if h.rec == nil {
			h.rec = a.rec(id.Unit)
		}
		u, ok, view := h.rec.unit, h.rec.ok, h.rec.view
		switch {
		case h.orphan:
			// Stop once another node holds the slot, or at its
			// stop_after (stopafter.go).
			out = a.orphanStray(id, h, view, out)
			if a.ops.handoffs[id] != nil {
				// A drain's: it stops once the next holder's instance
				// passes (ops.go, AwaitSuccessor).
				continue
			}
			if view != nil && view.slot(id.K).Node != "" && view.slot(id.K).Node != a.cfg.Node && h.phase != Stopping {
				h.phase = Stopping
				out = append(out, Stop{Slot: id})
			} else if due, ok := a.stopDue(u, h.renewed); ok && h.cut && h.phase != Stopping {
				if now.Before(due) {
					at(due)
					if until.IsZero() || due.Before(until) {
						until = due
					}
				} else {
					h.phase = Stopping
					out = append(out, Stop{Slot: id}, Record{Slot: id, Action: "lost", Reason: cutOffReason(u)})
				}
			}
			continue
		case h.lost || h.phase == Claiming || h.phase == Releasing || h.phase == HandingOff:
			continue
		}
		if due, ok := a.stopDue(u, a.renewed); ok && h.phase != Stopping && h.phase != Restoring {
			if now.Before(due) {
				at(due)
				if until.IsZero() || due.Before(until) {
					until = due
				}
			} else {
				// stop_after: cut off from Consul; the release follows
				// the stop (refused while cut off: the key is then left
				// to the invalidation).
				h.phase = Stopping
				out = append(out, Stop{Slot: id}, h.then(Record{Slot: id, Action: "release", Reason: cutOffReason(u)}))
				continue
			}
		}
		if h.exclusive && !a.cfg.Faults.NoWatchdog {
			deadline := a.rule.Deadline(h.confirmed, a.failed)
			if !now.Before(deadline) {
				out = a.lose(id, h, "hold not confirmed in time", out)
				continue
			}
			at(deadline)
			if until.IsZero() || deadline.Before(until) {
				until = deadline
			}
			confirm = append(confirm, id)
		}
		if view != nil && view.Index > 0 && (view != h.seen || h.index != h.seenIndex) {
			s := view.slot(id.K)
			if s.Node != "" && s.Node != a.cfg.Node && s.ModifyIndex > h.index {
				out = a.lose(id, h, "slot held by another session", out)
				continue
			}
			// Until the view or the token changes, the same again.
			h.seen, h.seenIndex = view, h.index
		}
		if !ok && a.waitsForUnits() {
			continue // adopted, the units not heard yet (adopt.go)
		}
		if (!ok || id.K >= u.Count) && h.phase == Restoring {
			// No instance yet: its handoff passes on what it was to
			// restore (volumes.go).
			h.phase = HandingOff
			out = append(out, PushHandoff{Slot: id, Index: h.index, Session: a.session}, h.then(a.scaledDown(id, u, ok)))
		} else if (!ok || id.K >= u.Count) && h.phase != Stopping {
			h.phase = Stopping
			out = append(out, Stop{Slot: id}, h.then(a.scaledDown(id, u, ok)))
		}
	}
	if ids != nil || len(a.held) == 0 {
		// Nothing done: the same until a hold changes or until comes.
		a.holdsMemo = holdsMemo{ok: len(out) == acted, gen: a.holdsGen, confirm: confirm, until: until}
	}
	if len(confirm) > 0 && a.session != "" && a.inflight < maxInflight {
		next := a.lastConfirm.Add(a.cfg.LockDelay / 5)
		if !now.Before(next) {
			a.inflight++
			a.lastConfirm = now
			out = append(out, Confirm{Slots: confirm, Session: a.session})
			// The next one is due whether or not this one comes back:
			// without this wake the next was sent only when an answer
			// came, so one slow answer let the watchdog kill every
			// exclusive instance of the node (the simulator's 1,000-node
			// chaos runs: hundreds of kills a seed).
			at(now.Add(a.cfg.LockDelay / 5))
		} else {
			at(next)
		}
	}

	// Strays and claims, for the units whose view changed or whose claim
	// time came.
	if a.session != "" && a.nodes != nil {
		dirty := a.dirtyList
		sort.Strings(dirty)
		for _, name := range dirty {
			r := a.rec(name)
			a.delWait(r, name)
			v := r.view
			if v == nil {
				continue
			}
			// Strays: held by this node in Consul, unknown here (a claim
			// applied whose answer was lost; or an earlier session's, not
			// yet invalidated: its release is refused until it is).
			for _, k := range v.byNode[a.cfg.Node] {
				id := SlotID{name, k}
				if _, ok := a.held[id]; ok {
					continue
				}
				if last, tried := a.strays[id]; tried && last.index >= v.Index && now.Before(last.at.Add(time.Second)) {
					if t, ok := a.waitAt[name]; !ok || last.at.Add(time.Second).Before(t) {
						a.setWait(r, name, last.at.Add(time.Second))
					}
					continue
				}
				a.strays[id] = strayTry{index: v.Index, at: now}
				a.held[id] = &held{phase: Releasing}
				a.heldChanged()
				out = append(out, Release{Slot: id, Session: a.session}, Record{Slot: id, Action: "release", Reason: "stray"})
			}
			u, ok := r.unit, r.ok
			if !ok || u.Count == 0 || !a.servicesHeard(u) {
				continue
			}
			// Free as the view says: every node with this view ranks the
			// same slots, so the ranking is the same everywhere.
			var free []int
			vs := r.vacant
			for k := range vs {
				if k < u.Count && v.holder(k) != "" {
					delete(vs, k)
				}
			}
			for k := range u.Count {
				if v.holder(k) == "" {
					free = append(free, k)
				}
			}
			if len(free) == 0 {
				continue
			}
			asg := a.assign(r, u, v, free, r.rerank, now)
			r.rerank = false
			// What this node holds of the unit, as it knows it: a view
			// may not show its latest claims yet.
			// An orphan's claim back on its way counts: with another
			// claim beside it the node held two slots of a unit of
			// max_per_node 1 (the simulator at 12 nodes, a node healed
			// from a cut claiming its orphan and a takeover at once).
			mine := 0
			for _, id := range a.heldOf(r, name) {
				if h := a.held[id]; !h.orphan || h.reclaim {
					mine++
				}
			}
			// Orphans first: claimed back, their instances run on.
			for _, k := range free {
				id := SlotID{name, k}
				if h, ok := a.held[id]; ok && h.orphan && !h.reclaim && mine < max(1, u.MaxPerNode) {
					if out = a.reclaimOrphan(now, u, v, id, h, out); h.reclaim {
						mine++
					}
				}
			}
			for _, k := range free {
				id := SlotID{name, k}
				if _, ok := a.held[id]; ok {
					continue
				}
				if mine >= max(1, u.MaxPerNode) {
					break
				}
				if t, off := a.volHeldOff(id, now); off {
					if w, ok := a.waitAt[name]; !ok || t.Before(w) {
						a.setWait(r, name, t)
					}
					continue
				}
				me, ok := asg[k]
				if !ok {
					continue
				}
				if idx, ok := a.refused[id]; ok {
					if idx >= v.Index {
						continue
					}
					delete(a.refused, id)
				}
				vac, seen := vs[k]
				if !seen {
					vac = vacancy{since: now, jitter: a.rng.Float64()}
					vs = a.vacantOf(name)
					vs[k] = vac
				}
				d, first := placement.ClaimDelay(me.Rank, a.cfg.Step, vac.jitter)
				if !first {
					d, _ = placement.SecondRoundDelay(me.HRWRank, a.cfg.Step, vac.jitter)
				}
				when := vac.since.Add(d)
				sl := v.slot(k)
				if !sl.Released && (sl.ModifyIndex > 0 || r.invalidated[k] != "" || a.ops.existed[id]) {
					// Freed by an invalidation: Consul refuses a lock
					// for the lock delay from when it was freed (which
					// this node saw no earlier than since), so the ranks
					// start after it; another node than its holder waits
					// node_lost_after and stop_after too (stopafter.go).
					// A slot this node never saw held that was claimed
					// before (its fresh claim refused: ops.existed) may
					// have been lost so as well: this node started since.
					when = when.Add(a.lostWait(u, a.lastHolder(r, id)))
				}
				when = maxTime(when, vac.notBefore)
				when, _ = a.afterReschedule(when, vac, sl, d)
				if now.Before(when) {
					if t, ok := a.waitAt[name]; !ok || when.Before(t) {
						a.setWait(r, name, when)
					}
					continue
				}
				tk, fresh, may, out2 := a.gateClaim(now, u, v, k, d, claimRank{me.Rank, r.asg.of[k]}, out)
				if out = out2; !may {
					continue
				}
				a.held[id] = &held{phase: Claiming, exclusive: u.Exclusive, sent: now, prev: a.place.prev[name][k]}
				a.heldChanged()
				mine++
				if tk != nil && tk.Logged && a.ops.casFrom != nil {
					a.ops.casFrom[id] = tk.Index
				}
				out = append(out, Claim{Slot: id, Session: a.session, Node: a.cfg.Node, Takeover: tk,
					Released: a.cfg.Control && v.slot(k).Released, Fresh: fresh, CheckFailed: a.cfg.Control, Delays: v.DelayKeys(k), From: a.claimFrom(r, v, k)},
					claimRecord(id, me.Rank, tk, a.claimFrom(r, v, k)))
			}
		}
		for _, name := range dirty {
			delete(a.dirty, name)
		}
		a.dirtyList = dirty[:0]
	}
	out = a.reconcileDeploy(now, out, at)
	out = a.reconcileVolumes(now, out, at)
	out = a.publishQueue(now, out, at)
	if len(a.waitAt) > 0 {
		if !a.waitMinOK {
			a.waitMin, a.waitMinOK = time.Time{}, true
			for _, t := range a.waitAt {
				if a.waitMin.IsZero() || t.Before(a.waitMin) {
					a.waitMin = t
				}
			}
		}
		if a.waitMin.After(now) {
			at(a.waitMin)
		} else {
			for _, t := range a.waitAt {
				at(t)
			}
		}
	}
	if !wake.IsZero() && (a.wakeAt.IsZero() || !a.wakeAt.Equal(wake) || !a.wakeAt.After(now)) {
		a.wakeAt = wake
		out = append(out, Wake{At: wake})
	}
	return out
}

// assign ranks the free slots of u with the view; the same view gives
// the same ranking, so it is kept until a view changes.
//
// A ranking is also kept while the unit's free slots only shrink (claims
// filled some) and its count stays, until a claim time comes (force): a
// node's place can then only have improved, by at most the nodes that
// claimed, and it ranks again when its claim time comes. Ranking over
// 1,000 nodes at every answer of a unit with a vacancy was most of a
// 1,000-node fleet's CPU after a loss.
func (a *Agent) assign(r *unitRec, u Unit, v *SlotsView, free []int, force bool, now time.Time) map[int]Place {
	nodes := a.rankNodes()
	x := a.extra(u, v, now)
	if c, ok := r.asg, r.hasAsg; ok && c.count == u.Count && c.ext == x.Key {
		if c.slotsIdx == v.Index && c.nodesIdx == nodes.Index {
			return c.mine
		}
		// Not when this node had a place only in slots filled since:
		// placement.Assign gave it one slot in turn (max_per_node), another
		// node took that one, and with no claim time coming it would
		// never rank again (TestTakenClaimRanksAgain). Nor when this node
		// was not among the nodes ranked (draining, or not live then):
		// back among them, it has no claim time either
		// (TestUndrainedNodeClaimsAgain).
		if !force && c.in && subset(free, c.free) && (len(c.mine) == 0 || placedIn(c.mine, free)) {
			return c.mine
		}
	}
	asg := a.rank(u, v, nodes, free, x)
	mine := map[int]Place{}
	of := map[int]int{}
	i, in := asg.pos[a.cfg.Node]
	if in { // Of, the node looked up once
		for _, k := range free {
			if ps := asg.places[k]; i < len(ps) && ps[i].Rank >= 0 {
				mine[k] = ps[i]
				n := 0
				for _, p := range ps {
					if p.Rank >= 0 {
						n++
					}
				}
				of[k] = n
			}
		}
	}
	a.stepAside(u.Name, asg, mine, now)
	r.asg, r.hasAsg = assignment{slotsIdx: v.Index, nodesIdx: nodes.Index, count: u.Count, ext: x.Key, free: free, mine: mine, of: of, in: in}, true
	return mine
}

// placedIn: mine has a place in one of the free slots.
func placedIn(mine map[int]Place, free []int) bool {
	for _, k := range free {
		if _, ok := mine[k]; ok {
			return true
		}
	}
	return false
}

// subset: every element of a (ascending) is in b (ascending).
func subset(a, b []int) bool {
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
	}
	return true
}

// DefaultRank is placement.Assign over a unit's slots view and the live
// nodes (placement.AssignRanks: its ranks alone).
func DefaultRank(u Unit, v *SlotsView, nodes *NodesView, free []int) Ranking {
	return DefaultRankWith(u, v, nodes, free, Extra{})
}

// heldChanged: a hold was added, removed or changed: the holds' loop
// looks at them again (holdsMemo).
func (a *Agent) heldChanged() {
	a.heldSorted, a.heldCounted = nil, false
	a.holdsGen++
}

// holdsMemo is what the holds' loop in reconcile found the last time it
// changed nothing: while no input touched the holds (holdsGen) and no
// deadline came (until), the loop would find the same again. A node hears
// every unit's answers and holds slots of a few: most of its steps leave
// its holds as they were.
type holdsMemo struct {
	ok      bool
	gen     uint64
	confirm []SlotID  // never changed once made (a Confirm may carry it)
	until   time.Time // the earliest deadline (zero: none)
}

func (a *Agent) heldIDs() []SlotID {
	if a.heldSorted != nil || (len(a.held) == 0 && a.heldCounted) {
		return a.heldSorted
	}
	for _, r := range a.recs {
		r.nHeld = 0
	}
	a.heldCounted = true
	if len(a.held) == 0 {
		return nil
	}
	ids := make([]SlotID, 0, len(a.held))
	for id := range a.held {
		ids = append(ids, id)
		a.rec(id.Unit).nHeld++
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Unit != ids[j].Unit {
			return ids[i].Unit < ids[j].Unit
		}
		return ids[i].K < ids[j].K
	})
	a.heldSorted = ids
	return ids
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// liveIn: node is among v's live nodes (listed, not failing).
func liveIn(v *NodesView, node string) bool {
	return v != nil && slices.Contains(v.Nodes, node) && !slices.Contains(v.Failing, node)
}
