package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

// Deployments in the step machine (CLUSTER.md section 5, with the one
// owner per record of section 12). A unit's deployment is one record,
// RecordKey, beside its holders' statuses (StatusKey) and its rollout
// tokens (TokenKey), all under DeployPrefix: one watch per unit answers
// them together (DeployAnswer).
//
// Who writes what:
//   - the record: the operator (deploy, promote: check-index on the
//     record) and the judge, the holder of the unit's slot 0, which alone
//     moves a running deployment on (promote, successful, failed, the
//     revert), by check-index on the record's ModifyIndex, with its audit
//     record in the same transaction (MoveDeployment);
//   - a slot's status: its holder alone, about its own hold (the version
//     it runs, healthy or failed there), in a transaction guarded by
//     check-session and check-index (the fencing token) on the slot's lock
//     key, which is never written while held (Publish);
//   - a token: the holder of the slot it names, locked by its session
//     (TakeToken, ReturnToken); at most Update.MaxParallel of them exist
//     (tokens 0 to MaxParallel-1), so at most that many instances are down
//     for an update at once.

// The keys and the record's codec are cluster's (cluster/keys.go,
// cluster/unitrecord.go: the KV layout in one place), under
// cluster.UnitsPrefix, apart from the deployments' specs under deploy/.

// DeployPrefix is a unit's deployment: its record, its holders' statuses
// and its rollout tokens (cluster.UnitDeployPrefix).
func DeployPrefix(unit string) string { return cluster.UnitDeployPrefix(unit) }

// RecordKey is the unit's deployment record (Deployment).
func RecordKey(unit string) string { return cluster.RecordKey(unit) }

// StatusKey is what the holder of slot k says about its hold (Status):
// locked by the holder's session (so that an invalidation deletes it),
// deleted by the release.
func (s SlotID) StatusKey() string { return cluster.UnitStatusKey(s.Unit, s.K) }

// TokenKey is rollout token t of unit: locked by the session of the
// holder updating the slot it names.
func TokenKey(unit string, t int) string { return cluster.TokenKey(unit, t) }

// UpdateBlock is a unit's update block (schema.Update's rollout part).
type UpdateBlock = cluster.UpdateBlock

// Deployment is a unit's deployment record (cluster.UnitRecord).
type Deployment = cluster.UnitRecord

// Outcome is how a deployment ended.
type Outcome = cluster.RecordOutcome

// Terminal says whether status ends a deployment.
func Terminal(status string) bool { return cluster.Terminal(status) }

// Status is what a holder says about its hold (cluster.HoldStatus: the
// fencing token it was written under, the version, when healthy there)
// and, when its instance was not healthy within healthy_deadline, why.
type Status struct {
	cluster.HoldStatus
	Failed string `json:"failed,omitempty"`
}

// Token is who holds a rollout token.
type Token struct {
	Session string
	K       int
	Index   uint64 // the token key's ModifyIndex
}

// DeployView is one answer of the watch on DeployPrefix(unit),
// immutable once built.
type DeployView struct {
	Unit        string
	Index       uint64
	Record      *Deployment // nil: the unit has never been deployed
	RecordIndex uint64      // the record's ModifyIndex (the judge's CAS)
	Status      map[int]Status
	Tokens      map[int]Token
}

// KV is one entry of a watch's answer.
type KV struct {
	Key         string
	Value       []byte
	Session     string
	ModifyIndex uint64
}

// ParseDeployView reads an answer of the watch on DeployPrefix(unit).
// Entries it cannot read are skipped (a corrupt record: not judged).
func ParseDeployView(unit string, index uint64, kvs []KV) *DeployView {
	v := &DeployView{Unit: unit, Index: index, Status: map[int]Status{}, Tokens: map[int]Token{}}
	for _, e := range kvs {
		kind, n, ok := cluster.ParseUnitDeployKey(unit, e.Key)
		if !ok {
			continue
		}
		switch kind {
		case cluster.UnitKeyRecord:
			if d, err := cluster.DecodeUnitRecord(e.Value); err == nil {
				v.Record, v.RecordIndex = d, e.ModifyIndex
			}
		case cluster.UnitKeyStatus:
			var st Status
			if json.Unmarshal(e.Value, &st) == nil {
				v.Status[n] = st
			}
		case cluster.UnitKeyToken:
			k, kerr := strconv.Atoi(string(e.Value))
			if kerr == nil && e.Session != "" {
				v.Tokens[n] = Token{Session: e.Session, K: k, Index: e.ModifyIndex}
			}
		}
	}
	return v
}

// Judge is the judge's decision on a running deployment d of a unit of
// count slots, from its holders' statuses (JudgeUnit without failed
// slots, for a unit named "").
func Judge(d *Deployment, count int, status map[int]Status, now time.Time, revert bool) (*Deployment, string) {
	next, what, _ := JudgeUnit(d, JudgeInput{Count: count, Status: status, Now: now, Revert: revert})
	return next, what
}

// JudgeInput is what the judge decides a unit's deployment on.
type JudgeInput struct {
	Unit string
	// Count: the unit's count as the node knows it; the record's Count
	// instead when it says one.
	Count  int
	Status map[int]Status
	// Failed: the unit's slots failed for good (control/'s marks,
	// cluster.FailedKey), by slot number.
	Failed map[int]cluster.FailedRecord
	Now    time.Time
	// Revert: auto_revert may act (deploys not paused).
	Revert bool
	// Progress: the latest HealthyAt at d's version the judge saw in
	// the views before this one (a status gone since, its hold ended,
	// still was progress); zero: none.
	Progress time.Time
}

// ProgressSkew is the margin the judge gives progress_deadline, computed
// from other nodes' clocks (the statuses' HealthyAt), before it fails a
// deployment on it.
const ProgressSkew = 2 * time.Second

// JudgeUnit is the judge's decision on a running deployment d: the next
// record and the decision's name, or nil; and, when none, the time at
// which the decision may change with nothing else moving (a
// progress_deadline; zero: none). Failed when a slot failed for good
// since d started (its failed mark; "slot <unit>/<k> failed: ..."),
// unless d is a revert (failed, it would leave the slots still at the
// failed version there: it ends once mariposa reset lets the slot run
// again, or by progress_deadline),
// when a slot's instance at d's version was not healthy within
// healthy_deadline, or when no instance became healthy at d's version for
// progress_deadline (plus ProgressSkew) since d started or the last one
// did (in this view or an earlier one: in.Progress; a count no node can
// hold ends so); with the revert to Stable in
// the same record when auto_revert (and Revert) says so. Successful once
// every slot is healthy at d's version; promoted when its canaries are
// healthy and auto_promote says so.
func JudgeUnit(d *Deployment, in JudgeInput) (*Deployment, string, time.Time) {
	if d == nil || d.Status != cluster.DeployRunning {
		return nil, "", time.Time{}
	}
	now := in.Now
	fail := func(reason string) (*Deployment, string, time.Time) {
		if in.Revert && d.Update.AutoRevert && d.Stable != "" && d.Stable != d.Version {
			return &Deployment{N: d.N + 1, Version: d.Stable, From: d.Version, Stable: d.Stable, Status: cluster.DeployRunning,
				Promoted: true, RevertOf: d.N, Update: d.Update, Count: d.Count, Started: now, Reason: "auto_revert: " + reason, Spec: d.Spec,
				Ended: &Outcome{N: d.N, Version: d.Version, Status: cluster.DeployFailed, Reason: reason}}, "deploy-revert", time.Time{}
		}
		next := *d
		next.Status, next.Reason = cluster.DeployFailed, reason
		return &next, "deploy-failed", time.Time{}
	}
	count := in.Count
	if d.Count > 0 {
		count = d.Count // the deployment's (the node's may be older)
	}
	healthy, canariesOK := 0, true
	progress := d.Started
	for k := range count {
		if f, ok := in.Failed[k]; ok && f.At.After(d.Started) && d.RevertOf == 0 {
			return fail(fmt.Sprintf("slot %s failed: %s", SlotID{in.Unit, k}, f.Reason))
		}
		s, ok := in.Status[k]
		if ok && s.Version == d.Version {
			if s.Failed != "" {
				return fail(fmt.Sprintf("slot %d: %s", k, s.Failed))
			}
			if s.HealthyAt != nil {
				healthy++
				if s.HealthyAt.After(progress) {
					progress = *s.HealthyAt
				}
				continue
			}
		}
		if k < d.Canaries {
			canariesOK = false
		}
	}
	if in.Progress.After(progress) {
		progress = in.Progress
	}
	next := *d
	if healthy == count {
		next.Status, next.Stable, next.Reason = cluster.DeploySuccessful, d.Version, ""
		return &next, "deploy-successful", time.Time{}
	}
	var wake time.Time
	if pd := d.Update.ProgressDeadline; pd > 0 {
		by := progress.Add(pd + ProgressSkew)
		if now.After(by) {
			return fail(fmt.Sprintf("no progress within progress_deadline (%s): %d of %d instances of %s healthy", pd, healthy, count, in.Unit))
		}
		wake = by.Add(time.Millisecond) // after by, not at it
	}
	if d.Canaries > 0 && !d.Promoted && canariesOK && d.Update.AutoPromote {
		next.Promoted = true
		return &next, "deploy-promote", time.Time{}
	}
	return nil, "", wake
}

// Inputs of deployments.
type (
	// DeployAnswer: a new answer of the watch on a unit's deployment.
	DeployAnswer struct{ View *DeployView }
	// InstanceHealthy: the slot's instance, running Version, passes its
	// checks (from the node's supervisor), in the catalog. Since, when
	// set, is when they passed where they run (mariposa's own runs of an
	// args check, before the catalog shows it): min_healthy_time counts
	// from there (healthyFrom). Zero: from this input.
	//
	// Said again when Since moves later (the checks broke and passed
	// again where they run before the catalog showed the break): the
	// streak then counts from the later Since.
	InstanceHealthy struct {
		Slot    SlotID
		Version string
		Since   time.Time
	}
	// InstanceUnhealthy: the slot's instance at Version, said healthy
	// before, is not any more (a check failing, a member not running, or
	// restarted since). min_healthy_time counts again from the next
	// InstanceHealthy, from that report (a streak after a break counts
	// from the look that sees it healthy again). A break after the streak
	// lasted min_healthy_time changes nothing (the rollout stops looking
	// then; status's count reads the catalog for what is true now).
	InstanceUnhealthy struct {
		Slot    SlotID
		Version string
	}
	// TokenDone answers TakeToken; ReturnDone answers ReturnToken.
	TokenDone struct {
		Slot  SlotID
		T     int
		OK    bool
		Index uint64 // the token key's ModifyIndex after the lock
	}
	ReturnDone struct {
		Slot SlotID
		T    int
		OK   bool
		// Index: the return's (ReturnToken.Index), the take it deleted
		// when OK: a view that still shows that take is from before.
		Index uint64
	}
	// PublishDone answers Publish (its Kind and Status.Version).
	PublishDone struct {
		Slot          SlotID
		Kind, Version string
		// Index: the hold's fencing token the status was written under
		// (Publish.Index): the answer of a previous hold of the slot by
		// the same session (released and claimed again) is not this
		// hold's.
		Index uint64
		OK    bool
	}
	// MoveDone answers MoveDeployment (OK false: refused, the record had
	// moved, or no answer).
	MoveDone struct {
		Unit string
		OK   bool
	}
)

// Actions of deployments.
type (
	// TakeToken: lock TokenKey(Slot.Unit, T) with the session, if the
	// session still holds the slot (check-session on its key).
	TakeToken struct {
		Slot    SlotID
		T       int
		Session string
	}
	// ReturnToken: delete the token (check-session on it, and delete-cas
	// on Index, the hold of the token it returns: a return that arrives
	// late never deletes a newer take's).
	ReturnToken struct {
		Slot    SlotID
		T       int
		Session string
		Index   uint64
	}
	// Update the slot's instance in place from one version to another:
	// stop it and start the new one with the same fencing token (the
	// hold does not change; answer: InstanceStarted).
	Update struct {
		Slot     SlotID
		Index    uint64
		Session  string
		From, To string
	}
	// Publish writes the slot's Status, fenced: check-session and
	// check-index (Index, the fencing token) on the slot's lock key, the
	// status key locked by the session, the audit record, one
	// transaction. The lock key itself is not written.
	//
	// Kind is what it says: "updating" (the slot moves to Status.Version:
	// written before the instance changes, so that no deployment is
	// judged on a health the slot had at another version), "healthy",
	// "failed".
	Publish struct {
		Slot    SlotID
		Index   uint64
		Session string
		Kind    string
		Status  Status
		Audit   Record
	}
	// MoveDeployment writes Next as the unit's record if the record's
	// ModifyIndex is still CAS, with its audit record, one transaction.
	MoveDeployment struct {
		Unit  string
		CAS   uint64
		Next  Deployment
		Audit Record
		// Also: a second record of the move, in its transaction (a
		// revert's: "deploy-failed", then "deploy-revert"); zero: none.
		Also Record
	}
)

// Updating is a held slot whose instance is being replaced by another
// version (Update sent, the new instance not started yet).
const Updating Phase = Releasing + 1

type deployState struct {
	session string
	views   map[string]*DeployView
	units   []string      // views' keys, in order
	list    []*DeployView // views, in that order
	// active: views with a running deployment or a token held; busy: a
	// hold has a token, or one on its way (as the last full look found).
	active int
	busy   bool
	holds  map[SlotID]*holdDeploy
	moving map[string]*move
	// progress: per unit, the latest HealthyAt at its running
	// deployment's version this node saw while it judged it
	// (JudgeInput.Progress).
	progress map[string]judgeProgress
	// unsaid: holds healthy at their version whose status does not say
	// so yet (every hold says it, a deployment running or not: status's
	// healthy count after a re-claim).
	unsaid map[SlotID]bool
	// loose: tokens of this session for slots it no longer holds
	// (tokens.go).
	loose map[looseKey]*looseToken
	// turns: each unit's rollout token turns (tokens.go), computed once
	// per look (seq).
	turns map[string]*tokenTurns
	seq   uint64
}

type judgeProgress struct {
	n  uint64 // the deployment
	at time.Time
}

type move struct {
	sent   bool
	at     uint64    // the view index it was sent on
	failed bool      // its answer said no
	retry  time.Time // then: again on the same view from this time
}

// holdDeploy is what the agent knows of a held slot's version and health.
type holdDeploy struct {
	version string
	// healthySince: since when the instance at version passes its checks
	// without a break (zero: not now); started: when it started at
	// version, for healthy_deadline (zero: running from before this
	// agent); broke: healthy at version and then not, since started: the
	// next streak counts from the report that says it healthy again.
	healthySince, started time.Time
	broke                 bool
	// lasted: when the instance had been healthy at version for
	// min_healthy_time without a break (zero: not yet); a break after
	// that changes nothing.
	lasted time.Time
	failed bool
	// said: the healthy status this hold has written, or that its
	// status shows (healthyKey: its version's).
	said              string
	token             int // -1: none
	taking, returning bool
	takingT           int    // the token being taken
	tokenIdx          uint64 // the token key's ModifyIndex once taken
	// strays: tokens this session holds for the slot unknown to it, and
	// the view index at which their return was last sent.
	strays map[int]uint64
	// gone: per token, the take whose return was answered deleted: a
	// view that shows it (or an older one) is from before the return,
	// and it is not given back again (a failed delete-cas each time
	// otherwise: a Raft entry per instance updated, issue 28).
	gone       map[int]uint64
	refusedAt  uint64
	tokenRetry time.Time
	pub        string // the status last sent: version|kind
	// stamped: the version the slot's status says it moves to (written
	// before the Update).
	stamped  string
	pubRetry time.Time
	// retake: an orphan claimed back while down for an update (its
	// token gone with its old session) takes a token again.
	retake bool
}

// healthyFrom is when min_healthy_time starts counting for an instance
// that the catalog shows passing at now (cluster.nextStreak's rule):
// since, when its checks passed where they run, if known (not zero),
// never before started (the update; zero: unknown), nor more than
// cluster.MaxCatalogLag before now, nor after now.
func healthyFrom(since, started, now time.Time) time.Time {
	if since.IsZero() || since.After(now) {
		return now
	}
	lo := now.Add(-cluster.MaxCatalogLag)
	if started.After(lo) {
		lo = started
	}
	if since.Before(lo) {
		return lo
	}
	return since
}

func (a *Agent) deps() *deployState {
	if a.dep == nil {
		a.dep = &deployState{views: map[string]*DeployView{}, holds: map[SlotID]*holdDeploy{}, moving: map[string]*move{},
			unsaid: map[SlotID]bool{}, progress: map[string]judgeProgress{}}
	}
	return a.dep
}

// startVersion is the version a newly claimed slot starts at: its
// target under the unit's deployment, "" when the unit has none.
func (a *Agent) startVersion(id SlotID, now time.Time) string {
	if a.dep == nil {
		return ""
	}
	// A new hold: nothing of a previous hold of the slot carries over
	// (its health, its status said).
	delete(a.dep.unsaid, id)
	v := a.dep.views[id.Unit]
	if v == nil || v.Record == nil {
		delete(a.dep.holds, id)
		return ""
	}
	ver := v.Record.StartVersion(id.K)
	a.dep.holds[id] = &holdDeploy{version: ver, started: now, token: -1}
	return ver
}

// minHealthyFor is the unit's min_healthy_time: its deployment record's
// update block's, else minHealthy.
func (a *Agent) minHealthyFor(unit string) time.Duration {
	if v := a.dep.views[unit]; v != nil && v.Record != nil {
		return v.Record.Update.MinHealthyTime
	}
	return a.minHealthy(unit)
}

// minHealthy is the min_healthy_time of a unit with no deployment
// record: its own update block's (the default without one).
func (a *Agent) minHealthy(unit string) time.Duration {
	if p := a.units[unit].Placement; p != nil {
		return p.Update.MinHealthyTime
	}
	return schema.DefaultUpdateMinHealthyTime
}

func (a *Agent) stepDeploy(now time.Time, in any, out []any) []any {
	d := a.deps()
	switch in := in.(type) {
	case DeployAnswer:
		i := sort.SearchStrings(d.units, in.View.Unit)
		if _, ok := d.views[in.View.Unit]; !ok {
			d.units = slices.Insert(d.units, i, in.View.Unit)
			d.list = slices.Insert(d.list, i, in.View)
		}
		d.views[in.View.Unit], d.list[i] = in.View, in.View
		d.active = 0
		for _, v := range d.views {
			if (v.Record != nil && v.Record.Status == cluster.DeployRunning) || len(v.Tokens) > 0 {
				d.active++
			}
		}
	case InstanceHealthy:
		hd := d.holds[in.Slot]
		if hd == nil {
			if _, ok := a.held[in.Slot]; !ok {
				break
			}
			hd = &holdDeploy{version: in.Version, token: -1}
			d.holds[in.Slot] = hd
		}
		if hd.version != in.Version {
			break
		}
		switch {
		case !hd.lasted.IsZero():
		case hd.healthySince.IsZero() && hd.broke:
			hd.healthySince = now
		case hd.healthySince.IsZero():
			hd.healthySince = healthyFrom(in.Since, hd.started, now)
		case in.Since.After(hd.healthySince):
			// Broke and passed again where the checks run, before the
			// catalog showed the break: the streak starts over there.
			hd.healthySince = earliest(in.Since, now)
		}
		if hd.said != hd.healthyKey() {
			d.unsaid[in.Slot] = true
		}
	case InstanceUnhealthy:
		hd := d.holds[in.Slot]
		if hd == nil || hd.version != in.Version || hd.healthySince.IsZero() || !hd.lasted.IsZero() || a.cfg.Faults.IgnoreUnhealthy {
			break
		}
		if due := hd.healthySince.Add(a.minHealthyFor(in.Slot.Unit)); !now.Before(due) {
			// It had lasted (the step at that time not taken yet).
			hd.lasted = due
			break
		}
		hd.healthySince, hd.broke = time.Time{}, true
		delete(d.unsaid, in.Slot)
	case TokenDone:
		hd := d.holds[in.Slot]
		if hd == nil || !hd.taking {
			break
		}
		hd.taking = false
		if in.OK {
			hd.token, hd.tokenIdx, hd.retake = in.T, in.Index, false
		} else if v := d.views[in.Slot.Unit]; v != nil {
			hd.refusedAt, hd.tokenRetry = v.Index, now.Add(time.Second)
		}
	case ReturnDone:
		d.looseDone(in)
		if hd := d.holds[in.Slot]; hd != nil {
			hd.returning = false
			if in.OK && in.Index > hd.gone[in.T] {
				if hd.gone == nil {
					hd.gone = map[int]uint64{}
				}
				hd.gone[in.T] = in.Index
			}
		}
	case PublishDone:
		hd, h := d.holds[in.Slot], a.held[in.Slot]
		if hd == nil || h == nil || h.index != in.Index {
			break
		}
		switch key := in.Version + "|" + in.Kind; {
		case !in.OK && hd.pub == key:
			hd.pub, hd.pubRetry = "", now.Add(time.Second)
		case in.OK && in.Kind == "updating":
			hd.stamped = in.Version
		case in.OK && in.Kind == "healthy" && in.Version == hd.version:
			hd.said = hd.healthyKey()
			delete(d.unsaid, in.Slot)
		}
	case MoveDone:
		if m := d.moving[in.Unit]; m != nil {
			m.sent = false
			if !in.OK {
				m.failed, m.retry = true, now.Add(time.Second)
			}
		}
	}
	return out
}

// reconcileDeploy is what follows from the deployments at now: the holds'
// updates, tokens and statuses, and the judge's decisions.
func (a *Agent) reconcileDeploy(now time.Time, out []any, at func(time.Time)) []any {
	d := a.dep
	if d == nil {
		return out
	}
	if d.session == a.session && d.active == 0 && !d.busy && len(d.unsaid) == 0 {
		// No deployment runs, no token is held or on its way, no hold
		// has a health to say: nothing moves (most steps of a fleet).
		return out
	}
	d.seq++
	if d.session != a.session {
		// Tokens die with the session that locked them. A hold that
		// had one is down for an update: claimed back (an orphan), it
		// takes one again (retake).
		for _, hd := range d.holds {
			hd.retake = hd.retake || hd.token >= 0 || hd.taking
			hd.token, hd.taking, hd.returning = -1, false, false
		}
		d.session = a.session
	}
	// Holds that ended: their token goes back (a scale-down ends a hold
	// with its session alive).
	var ended []SlotID
	var taking map[string]map[int]bool
	for id, hd := range d.holds {
		if _, ok := a.held[id]; !ok {
			ended = append(ended, id)
			continue
		}
		t := hd.token
		if hd.taking {
			t = hd.takingT
		}
		if t >= 0 {
			if taking == nil {
				taking = map[string]map[int]bool{}
			}
			if taking[id.Unit] == nil {
				taking[id.Unit] = map[int]bool{}
			}
			taking[id.Unit][t] = true
		}
	}
	for _, id := range sortSlots(ended) {
		if hd := d.holds[id]; hd.token >= 0 && a.session != "" {
			out = append(out, ReturnToken{Slot: id, T: hd.token, Session: a.session, Index: hd.tokenIdx})
			d.looseSent(id, hd.token)
		}
		delete(d.holds, id)
		delete(d.unsaid, id)
	}
	out = a.returnLoose(out)
	for id := range d.unsaid {
		if d.holds[id] == nil {
			delete(d.unsaid, id)
		}
	}
	if a.session == "" {
		return out
	}
	busy := false
	for _, id := range a.heldIDs() {
		h, hd, v := a.held[id], d.holds[id], d.views[id.Unit]
		if hd != nil && (hd.token >= 0 || hd.taking || hd.returning) {
			busy = true
		}
		if hd == nil || v == nil || h.lost || h.orphan {
			continue
		}
		if v.Record == nil {
			// No deployment: the hold says when it is healthy.
			_, out = a.sayHealthy(now, id, h, hd, v, a.minHealthy(id.Unit), nil, out, at)
			continue
		}
		rec, up := v.Record, v.Record.Update
		running := rec.Status == cluster.DeployRunning
		if !running && hd.token < 0 && !hd.returning && len(v.Tokens) == 0 {
			// Nothing moves, nothing to give back: the hold says when
			// it is healthy.
			_, out = a.sayHealthy(now, id, h, hd, v, up.MinHealthyTime, rec, out, at)
			continue
		}
		if !hd.taking && !hd.returning {
			// A token this session holds for the slot that it does not
			// know it holds (a take applied whose answer was lost, a
			// return refused): given back, once per view that shows it.
			// Never adopted: a view from before a return still shows
			// the token, and an update runs only on a take's answer.
			for _, t := range sortedTokens(v.Tokens) {
				tok := v.Tokens[t]
				if tok.Session != a.session || tok.K != id.K || t == hd.token || hd.strays[t] >= v.Index || tok.Index <= hd.gone[t] {
					continue
				}
				if hd.strays == nil {
					hd.strays = map[int]uint64{}
				}
				hd.strays[t] = v.Index
				out = append(out, ReturnToken{Slot: id, T: t, Session: a.session, Index: tok.Index})
				hd.returning = true
				break
			}
		}
		returnToken := func() {
			if hd.token >= 0 && !hd.returning {
				out = append(out, ReturnToken{Slot: id, T: hd.token, Session: a.session, Index: hd.tokenIdx})
				hd.token, hd.returning = -1, true
			}
		}
		takeToken := func() {
			if hd.taking || hd.returning {
				return
			}
			if v.Index <= hd.refusedAt && now.Before(hd.tokenRetry) {
				at(hd.tokenRetry)
				return
			}
			if t := a.tokenFor(id, v, up.MaxParallel, taking[id.Unit], now, at); t >= 0 {
				hd.taking, hd.takingT = true, t
				if taking == nil {
					taking = map[string]map[int]bool{}
				}
				if taking[id.Unit] == nil {
					taking[id.Unit] = map[int]bool{}
				}
				taking[id.Unit][t] = true
				out = append(out, TakeToken{Slot: id, T: t, Session: a.session})
			}
		}
		if h.phase == Stopping || h.phase == Releasing {
			returnToken()
			continue
		}
		if h.phase != Running && h.phase != Updating {
			continue
		}
		target := rec.Target(id.K)
		if h.phase == Running && running && target != "" && hd.version != target {
			var held bool
			if held, out = a.updateHeld(id, target, out); held {
				continue // deploys paused (intents.go)
			}
			if target == rec.Version && failedAt(v, a.units[id.Unit].Count, target) {
				// A slot failed at the version: the deployment fails
				// (Judge), so no instance goes down for it meanwhile,
				// the judge perhaps absent (slot 0 waiting for its
				// takeover) and a token perhaps freed by a lost session
				// whose instance is still down at it.
				continue
			}
			if hd.token < 0 && !a.cfg.Faults.NoToken {
				takeToken()
				continue
			}
			from := hd.version
			if hd.stamped != target {
				// The status first says what the slot moves to, with the
				// decision's record; the instance changes once it is
				// written.
				out = a.publish(now, id, h, hd, Status{HoldStatus: cluster.HoldStatus{Index: h.index, Version: target}}, "updating",
					Record{Slot: id, Action: "update", From: from, To: target, Reason: fmt.Sprintf("deployment %d: %s -> %s", rec.N, from, target)}, out)
				continue
			}
			h.phase = Updating
			hd.version, hd.healthySince, hd.started, hd.failed, hd.broke, hd.said, hd.lasted = target, time.Time{}, now, false, false, "", time.Time{}
			delete(d.unsaid, id)
			out = append(out, Update{Slot: id, Index: h.index, Session: a.session, From: from, To: target})
			continue
		}
		if h.phase != Running {
			continue
		}
		var healthy bool
		healthy, out = a.sayHealthy(now, id, h, hd, v, up.MinHealthyTime, rec, out, at)
		switch {
		case healthy, hd.saidHealthy():
			// Healthy at its version for min_healthy_time once: a break
			// after that fails nothing.
		case !hd.healthySince.IsZero() || hd.started.IsZero() || up.HealthyDeadline <= 0:
		case !hd.failed && now.Before(hd.started.Add(up.HealthyDeadline)):
			at(hd.started.Add(up.HealthyDeadline))
		default:
			// Said again until it is written (a refused write resets
			// the status last sent).
			hd.failed = true
			why := fmt.Sprintf("not healthy within healthy_deadline (%s) at %s", up.HealthyDeadline, hd.version)
			out = a.publish(now, id, h, hd, Status{HoldStatus: cluster.HoldStatus{Index: h.index, Version: hd.version}, Failed: why}, "failed",
				Record{Slot: id, Action: "rollout-failed", To: hd.version, Reason: why}, out)
		}
		if hd.retake {
			// An orphan claimed back while down for an update: its
			// token went with the old session; it takes one again
			// (it is still down), until it is healthy at the target
			// or the deployment no longer runs.
			if !running || hd.version != target || healthy || hd.saidHealthy() {
				hd.retake = false
			} else if hd.token < 0 && !a.cfg.Faults.NoToken {
				takeToken()
			}
		}
		// The token goes back once the slot is healthy at its target, or
		// when the deployment no longer runs. A failed instance keeps it
		// (it is still down) until a revert moves it back.
		if hd.token >= 0 && ((healthy && hd.version == target) || !running) {
			returnToken()
		}
		if hd.pub == "" && hd.pubRetry.After(now) {
			at(hd.pubRetry)
		}
	}
	d.busy = busy
	// The judge: the holder of the unit's slot 0.
	for i, unit := range d.units {
		v := d.list[i]
		if v.Record == nil || v.Record.Status != cluster.DeployRunning {
			delete(d.progress, unit)
			continue
		}
		u, ok := a.units[unit]
		if !ok {
			continue
		}
		failed, mine := a.failedSlots(unit, max(u.Count, v.Record.Count), v.Record.Started)
		h := a.held[SlotID{unit, 0}]
		judge := h != nil && !h.lost && !h.orphan && (h.phase == Running || h.phase == Updating)
		if !judge && !mine {
			// Not the judge; but the node that failed a slot of the unit
			// since the deployment started fails it too (CAS on the
			// record: one of them does it), so that a unit whose slot 0
			// failed (count 1: nobody holds a slot) is judged.
			continue
		}
		// The progress this judge saw: a slot healthy at the version
		// whose status is gone since (its hold ended) made progress all
		// the same.
		p := d.progress[unit]
		if p.n != v.Record.N {
			p = judgeProgress{n: v.Record.N}
		}
		count := u.Count
		if v.Record.Count > 0 {
			count = v.Record.Count
		}
		for k, st := range v.Status {
			if k < count && st.Version == v.Record.Version && st.HealthyAt != nil && st.HealthyAt.After(p.at) {
				p.at = *st.HealthyAt
			}
		}
		d.progress[unit] = p
		m := d.moving[unit]
		if m == nil {
			m = &move{}
			d.moving[unit] = m
		}
		if m.sent || (v.Index <= m.at && !(m.failed && !now.Before(m.retry))) {
			if m.failed && v.Index <= m.at {
				at(m.retry)
			}
			continue
		}
		judgeNow := now
		if a.cfg.Faults.NoProgressSkew {
			judgeNow = now.Add(ProgressSkew)
		}
		next, what, wake := JudgeUnit(v.Record, JudgeInput{Unit: unit, Count: u.Count, Status: v.Status, Failed: failed, Now: judgeNow,
			Revert: !a.cfg.Faults.NoRevert && !a.revertHeld(unit), Progress: p.at})
		if a.cfg.Faults.NoProgressSkew && !wake.IsZero() {
			wake = wake.Add(-ProgressSkew)
		}
		if !wake.IsZero() && judge {
			at(wake) // progress_deadline
		}
		if next == nil || (!judge && what != "deploy-failed" && what != "deploy-revert") {
			continue
		}
		m.sent, m.at, m.failed = true, v.Index, false
		reason := next.Reason
		if what == "deploy-successful" {
			reason = fmt.Sprintf("every instance healthy at %s", next.Version)
		} else if what == "deploy-promote" {
			reason = "auto_promote: every canary healthy"
		}
		rec, also := moveRecords(unit, what, v.Record, next, fmt.Sprintf("deployment %d: %s", v.Record.N, reason))
		out = append(out, MoveDeployment{Unit: unit, CAS: v.RecordIndex, Next: *next, Audit: rec, Also: also})
	}
	return out
}

// failedAt: v shows a slot of the unit's count failed at version (the
// judge fails its deployment on it).
func failedAt(v *DeployView, count int, version string) bool {
	for k, s := range v.Status {
		if k < count && s.Version == version && s.Failed != "" {
			return true
		}
	}
	return false
}

// failedSlots: the unit's slots below count that control/ shows failed
// for good (nil: none, or no watch on control/), and whether this node
// failed one of them after since (the deployment's start).
func (a *Agent) failedSlots(unit string, count int, since time.Time) (map[int]cluster.FailedRecord, bool) {
	ctl := a.ops.ctl
	if ctl == nil || len(ctl.Failed) == 0 || a.cfg.Faults.IgnoreFailed {
		return nil, false
	}
	var out map[int]cluster.FailedRecord
	mine := false
	for key, r := range ctl.Failed {
		i := strings.LastIndexByte(key, '/')
		if i < 0 {
			continue
		}
		if key[:i] != unit {
			continue
		}
		k, err := strconv.Atoi(key[i+1:])
		if err != nil || k < 0 || k >= count {
			continue
		}
		if out == nil {
			out = map[int]cluster.FailedRecord{}
		}
		out[k] = r
		mine = mine || (r.Node == a.cfg.Node && r.At.After(since))
	}
	return out, mine
}

// sayHealthy: whether the hold's instance has been healthy at its version
// without a break for min (min_healthy_time) at now, and then its status
// saying so, fenced, unless it does already; rec is the unit's record
// (nil: none), named in the audit record while it runs. A hold says it
// whether a deployment runs or not: a slot claimed again after a
// deployment counts as healthy in status once it is.
func (a *Agent) sayHealthy(now time.Time, id SlotID, h *held, hd *holdDeploy, v *DeployView, min time.Duration, rec *Deployment, out []any, at func(time.Time)) (bool, []any) {
	if h.phase != Running {
		return false, out
	}
	if hd.lasted.IsZero() {
		if hd.healthySince.IsZero() {
			return false, out
		}
		due := hd.healthySince.Add(min)
		if now.Before(due) {
			at(due)
			return false, out
		}
		hd.lasted = due
	}
	due := hd.lasted
	if s, ok := v.Status[id.K]; ok && s.Version == hd.version && s.HealthyAt != nil && s.Index == h.index {
		hd.said = hd.healthyKey()
	}
	if hd.said == hd.healthyKey() {
		delete(a.dep.unsaid, id)
		return true, out
	}
	reason := hd.version + " healthy for min_healthy_time"
	if rec != nil && rec.Status == cluster.DeployRunning {
		reason = fmt.Sprintf("deployment %d: %s", rec.N, reason)
	}
	out = a.publish(now, id, h, hd, Status{HoldStatus: cluster.HoldStatus{Index: h.index, Version: hd.version, HealthyAt: &due}}, "healthy",
		Record{Slot: id, Action: "healthy", To: hd.version, Reason: reason}, out)
	if hd.pub == "" && hd.pubRetry.After(now) {
		at(hd.pubRetry)
	}
	return true, out
}

// saidHealthy: the hold's status says (or is being written to say) that
// it is healthy at its version.
func (hd *holdDeploy) saidHealthy() bool {
	return hd.said == hd.healthyKey() || hd.pub == hd.healthyKey()
}

// healthyKey names the healthy status at the hold's version, as publish
// names what it sent (pub).
func (hd *holdDeploy) healthyKey() string { return hd.version + "|healthy" }

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// publish sends st unless the same was sent already.
func (a *Agent) publish(now time.Time, id SlotID, h *held, hd *holdDeploy, st Status, kind string, rec Record, out []any) []any {
	key := st.Version + "|" + kind
	if hd.pub == key || (hd.pub == "" && now.Before(hd.pubRetry)) {
		return out
	}
	hd.pub, hd.pubRetry = key, time.Time{}
	return append(out, Publish{Slot: id, Index: h.index, Session: a.session, Kind: kind, Status: st, Audit: rec})
}

// freeToken is a token below limit that the view shows free and this
// node is not taking, starting from slot k's own (so that holders spread
// over them); -1 none.
func freeToken(v *DeployView, limit, k int, mine map[int]bool) int {
	for i := range limit {
		t := (k + i) % limit
		if _, held := v.Tokens[t]; !held && !mine[t] {
			return t
		}
	}
	return -1
}

func sortSlots(ids []SlotID) []SlotID {
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Unit != ids[j].Unit {
			return ids[i].Unit < ids[j].Unit
		}
		return ids[i].K < ids[j].K
	})
	return ids
}

func sortedTokens(m map[int]Token) []int {
	out := make([]int, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Ints(out)
	return out
}
