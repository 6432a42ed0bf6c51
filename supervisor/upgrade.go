package supervisor

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/monoclock"
	"github.com/mariposa-sh/mariposa/internal/proc"
)

// An upgrade in place (website/upgrade.md): the running mariposa re-execs
// the binary at its path with its children running. Handover parks every
// instance's loop (no start, stop, restart or registration change from
// then on) and freezes the process layer (no fork, no output read, no
// reap), then reports what the next image needs: each running child, its
// restarts and leader term, and the node's sessions. The next image adopts
// them (Options.Adopt) instead of starting anew.

// Handover is the runner's part of the state an upgrade hands over.
type Handover struct {
	Node     string                 `json:"node"`
	Started  time.Time              `json:"started"` // Options.Started: the node lock's value
	Sessions []lease.SessionHandoff `json:"sessions"`
	// LastBeat is when the previous image last updated mariposa's
	// liveness check (zero: never).
	LastBeat  time.Time         `json:"last_beat,omitzero"`
	Instances []InstanceHandoff `json:"instances"`
}

// InstanceHandoff is one instance as an upgrade hands it over.
type InstanceHandoff struct {
	Key       string        `json:"key"`
	ServiceID string        `json:"service_id"`
	Proc      *proc.Handoff `json:"proc,omitempty"` // nil: no process to adopt; the instance boots
	Restarts  int           `json:"restarts"`
	LastEnd   string        `json:"last_end,omitempty"` // how the last run ended
	Term      *TermHandoff  `json:"term,omitempty"`     // the leader term the process runs under
	// DepsAtStart: which dependencies held when the process started
	// (on_lost compares against it).
	DepsAtStart []bool `json:"deps_at_start,omitempty"`
	// Tracker is the restart policy's memory (the window's restarts, the
	// consecutive failures).
	Tracker TrackerState `json:"tracker"`
	// Idle, when there is no process: a service waiting in backoff (until
	// Until), failed, completed or paused (its restart held) stays so
	// (Reason says why), rather than starting afresh.
	Idle   State     `json:"idle,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Until  time.Time `json:"until,omitzero"`
	Paused string    `json:"paused,omitempty"` // the pause a held restart waits on
	// Slot is the count slot ("<unit>/<k>") the instance runs in, SlotKey
	// its lock.
	Slot    string `json:"slot,omitempty"`
	SlotKey string `json:"slot_key,omitempty"`
	// ConfirmBy, for a process that runs under a confirmed hold (a leader
	// term, an exclusive slot), is the moment its last confirmation stops
	// covering it (lease.Term.StrictDeadline), on CLOCK_MONOTONIC in
	// nanoseconds (the same clock in both images): the next image kills
	// it (or ends its term) then unless a read confirmed the hold again.
	// 0: nothing to confirm.
	ConfirmBy int64 `json:"confirm_by_monotonic_ns,omitempty"`

	// confirmBy is ConfirmBy moved on by the next image's own confirming
	// read, on this process's clock (adoptions); zero: none.
	confirmBy time.Time
}

// TermHandoff is a held leader term.
type TermHandoff struct {
	Key     string `json:"key"`
	Session string `json:"session"`
	Index   uint64 `json:"index"`
}

type handoverReq struct {
	reply  chan handoverAns
	resume chan struct{} // closed when the upgrade failed: the loop goes on
}

type handoverAns struct {
	busy string // why the instance cannot be handed over now
	p    *proc.Process
	h    InstanceHandoff
	// deadline is the confirmed hold's StrictDeadline, read when the
	// state is written; nil without one.
	deadline func() time.Time
}

// handover answers an upgrade's request and, unless busy, parks the loop
// until the exec (for good) or the upgrade's failure (resume).
func (l *loop) handover(req handoverReq) {
	// No successor starts at an exit while the instance is parked: the
	// freeze hands over the process as it is. One that started first is
	// taken (its exit and start decided) before the answer.
	l.holding = true
	defer func() { l.holding = false; l.rearm() }()
	for l.armed != nil && l.armed == l.p {
		a := l.armed
		l.armed = nil
		if !a.Disarm() {
			break
		}
		l.armed = a // reap takes its successor
		l.queue = append([]input{l.reap()}, l.queue...)
		l.drain()
	}
	s := &l.s
	ans := handoverAns{h: InstanceHandoff{Key: l.in.key, ServiceID: l.in.id, Restarts: s.restarts, LastEnd: s.lastEnd,
		Tracker: s.tracker.State()}}
	if l.p == nil && s.svc.Leader == nil && s.slot == nil {
		switch s.state {
		case StateBackoff, StateFailed, StateCompleted, StatePaused:
			ans.h.Idle, ans.h.Reason, ans.h.Until, ans.h.Paused = s.state, s.reason, s.until, s.paused.Why
		}
	}
	if l.in.slot != nil {
		ans.h.Slot, ans.h.SlotKey = l.in.slot.Name(), l.in.slot.Key
	}
	switch {
	case s.stopping || s.draining || s.shutdown:
		ans.busy = "stopping"
	case l.p != nil && s.pid == 0:
		ans.busy = "starting"
	case l.p != nil:
		ans.p = l.p
		ans.h.DepsAtStart = append([]bool(nil), s.depsAtStart...)
		if s.term != nil && !s.termLost {
			ans.h.Term = &TermHandoff{Key: s.term.Key, Session: s.term.Session, Index: s.term.Index}
			if l.term != nil {
				ans.deadline = l.term.StrictDeadline
			}
		}
		if l.in.slot != nil && l.in.slot.Deadline != nil {
			ans.deadline = l.in.slot.Deadline
		}
	}
	req.reply <- ans
	if ans.busy != "" {
		return
	}
	<-req.resume
}

// boot is the loop's first input: the adoption of the process the previous
// image handed over, or a boot.
func (l *loop) boot() input {
	in := l.in
	a := in.adopt
	in.adopt = nil
	if a != nil && a.Proc == nil && a.Idle != "" {
		return input{kind: inAdopted, restarts: a.Restarts, why: a.LastEnd, tracker: a.Tracker,
			idle: a.Idle, reason: a.Reason, until: a.Until, pause: Pause{Why: a.Paused}}
	}
	if a == nil || a.Proc == nil {
		if a != nil {
			l.s.restarts, l.s.lastEnd = a.Restarts, a.LastEnd
			l.s.tracker.Restore(a.Tracker)
		}
		return input{kind: inBoot}
	}
	p, err := proc.Adopt(*a.Proc, in.sink, in.svc.Name, in.tap)
	if err != nil {
		in.log.Error("could not adopt the process the previous mariposa ran; killing it and starting anew", "pid", a.Proc.Pid, "error", err)
		_ = syscall.Kill(-a.Proc.Pid, syscall.SIGKILL)
		l.s.restarts, l.s.lastEnd = a.Restarts, a.LastEnd
		return input{kind: inBoot}
	}
	if in.cgroups != nil {
		// The group the process runs in: found again, not emptied.
		if g, err := in.cgroups.Group(groupName(in.node, in.id), resourcesOf(in.svc)); err == nil {
			in.group = g
			in.oomBase = g.OOMKills()
		} else {
			in.log.Warn("could not find the adopted process's control group", "error", err)
		}
	}
	l.p = p
	i := input{kind: inAdopted, pid: p.Pid, started: p.Started, restarts: a.Restarts, depsAtStart: a.DepsAtStart, why: a.LastEnd,
		tracker: a.Tracker}
	if a.Term != nil {
		i.term, i.hasTerm = termInfo{Key: a.Term.Key, Session: a.Term.Session, Index: a.Term.Index}, true
		l.adoptBy = a.confirmBy
	}
	in.log.Info("adopted the process of the previous mariposa", "pid", p.Pid)
	return i
}

// Handover parks every instance and freezes the process layer, then
// returns what the next image adopts. thaw undoes it all (the upgrade
// failed; nothing was handed over). An instance starting or stopping fails
// it: try again.
//
// Just after an upgrade in place, the processes of count slots it handed
// over wait for the fleet to take their slots back; handed over before
// that, no image would have them (neither this runner's instances nor
// the fleet's holds): the next image would kill them as processes nobody
// handed it. So it first waits for the fleet, as a stop does
// (awaitAdoption: bounded by adoptWait and ctx).
func (r *Runner) Handover(ctx context.Context) (h *Handover, thaw func(), err error) {
	if r.slotsAwaitingAdoption() {
		r.log.Info("upgrading once the fleet has taken back the slots the last upgrade handed over")
		r.awaitAdoption(ctx)
	}
	r.mu.Lock()
	var ins []*Instance
	for _, k := range r.order {
		ins = append(ins, r.instances[k])
	}
	node := r.node
	r.mu.Unlock()
	resume := make(chan struct{})
	thawProc := func() {}
	thaw = func() { thawProc(); close(resume) }
	var parked []handoverAns
	var busy []string
	for _, in := range ins {
		req := handoverReq{reply: make(chan handoverAns, 1), resume: resume}
		select {
		case in.handc <- req:
		case <-in.done:
			continue // stopped for good: nothing to hand over
		case <-ctx.Done():
			thaw()
			return nil, nil, fmt.Errorf("instance %s did not answer: %w", in.key, ctx.Err())
		}
		a := <-req.reply
		if a.busy != "" {
			busy = append(busy, in.key+" ("+a.busy+")")
			continue
		}
		parked = append(parked, a)
	}
	if len(busy) > 0 {
		thaw()
		return nil, nil, fmt.Errorf("instances are starting or stopping: %s; try again", strings.Join(busy, ", "))
	}
	// A fresh confirmation of every confirmed hold: the deadlines handed
	// over (ConfirmBy) then leave the exec the whole lock_delay/2. Bounded:
	// without an answer the deadlines stay those of the last round.
	cctx, cancel := context.WithTimeout(ctx, confirmBeforeExec)
	r.leases.ConfirmNow(cctx)
	cancel()
	t, err := proc.Freeze()
	if err != nil {
		thaw()
		return nil, nil, err
	}
	thawProc = t
	h = &Handover{Node: node, Started: r.opts.Started, Sessions: r.leases.Sessions()}
	if ns := r.lastBeat.Load(); ns != 0 {
		h.LastBeat = time.Unix(0, ns)
	}
	for _, a := range parked {
		if a.p != nil {
			if ph, ok := a.p.Handoff(); ok {
				a.h.Proc = &ph
				if a.deadline != nil {
					a.h.ConfirmBy = monotonicNanos(a.deadline())
				}
			} else {
				a.h.Term = nil // exited meanwhile: the next image boots it
			}
		}
		h.Instances = append(h.Instances, a.h)
	}
	return h, thaw, nil
}

// Fds lists the descriptors the next image needs (see proc.KeepOpen).
func (h *Handover) Fds() []int {
	var fds []int
	for _, in := range h.Instances {
		if in.Proc != nil {
			fds = append(fds, in.Proc.Fds()...)
		}
	}
	return fds
}

// adoptions checks what the previous image handed over against Consul, once
// the sessions are adopted: a term whose session is not the lease's now, or
// whose key that session no longer holds, is dropped, and the process of a
// standby (which may run only while it leads) is killed; the instance then
// goes on as one without a term.
func (r *Runner) adoptions(ctx context.Context, h *Handover) map[string]*InstanceHandoff {
	out := map[string]*InstanceHandoff{}
	for i := range h.Instances {
		a := h.Instances[i]
		if a.Term != nil {
			svc := r.cfg.Service(strings.SplitN(a.Key, "/", 2)[0])
			ok := svc != nil && svc.Leader != nil && svc.Leader.Key == a.Term.Key &&
				r.leases.Lease(svc.Leader.SessionTTL, svc.Leader.LockDelay).Session() == a.Term.Session
			if ok {
				lockDelay := r.leases.Lease(svc.Leader.SessionTTL, svc.Leader.LockDelay).LockDelay()
				ok = r.confirmHandedOver(ctx, &a, a.Term.Key, a.Term.Session, lockDelay)
			}
			if !ok {
				r.log.Warn("the leader term handed over is no longer held; the instance goes on without it", "service", a.Key, "key", a.Term.Key)
				a.Term, a.confirmBy = nil, time.Time{}
				if svc != nil && svc.Leader != nil && svc.Leader.Mode == "standby" && a.Proc != nil {
					_ = syscall.Kill(-a.Proc.Pid, syscall.SIGKILL)
				}
			}
		}
		if a.Slot != "" && a.Proc != nil {
			// A slot's process runs only while the node's session holds
			// the slot (an exclusive one may be another node's the moment
			// it is not): killed at once otherwise, and reaped later
			// (dropUnadopted); the fleet does not take the slot again.
			l := r.leases.Lease(0, 0)
			mine := l.Session()
			if s := r.opts.AdoptedSlotSession; s != "" {
				mine = s
			}
			if mine == "" || !r.confirmHandedOver(ctx, &a, a.SlotKey, mine, l.LockDelay()) {
				r.log.Warn("the slot handed over is no longer held by this node; stopping its process", "slot", a.Slot, "pid", a.Proc.Pid)
				_ = syscall.Kill(-a.Proc.Pid, syscall.SIGKILL)
				a.confirmBy = time.Time{}
			}
		}
		out[a.Key] = &a
	}
	return out
}

// confirmHandedOver reads key consistently to confirm that session still
// holds it, for a process handed over (see confirmHold).
func (r *Runner) confirmHandedOver(ctx context.Context, a *InstanceHandoff, key, session string, lockDelay time.Duration) bool {
	read := func(ctx context.Context) (string, error) {
		pair, _, err := r.opts.Client.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil || pair == nil {
			return "", err
		}
		return pair.Session, nil
	}
	ok, why := confirmHold(ctx, a, read, session, lockDelay)
	if why != "" {
		r.log.Warn("the hold handed over was not confirmed in time across the upgrade", "key", key, "why", why)
	}
	return ok
}

// confirmHold confirms, with read (the session holding the key, read
// consistently), that session still holds the key a process handed over
// runs under. A process under a confirmed hold (a.ConfirmBy) must be
// confirmed by its deadline, as the previous image's watchdog would have
// required: the read gets no longer, and a deadline already past fails it
// (why says so). A read that shows the hold is a confirmation sent at its
// send time: a.confirmBy is then that plus lockDelay/2 (the strict rule),
// by which this image's own term (the elector's, the fleet's) must have
// taken over (the loop's adoptBy, Runner.confirmSlot).
func confirmHold(ctx context.Context, a *InstanceHandoff, read func(context.Context) (string, error), session string, lockDelay time.Duration) (ok bool, why string) {
	if a.ConfirmBy != 0 {
		by := fromMonotonicNanos(a.ConfirmBy)
		if late := time.Since(by); late >= 0 {
			return false, fmt.Sprintf("its last confirmation ran out %v before this image could read it", late.Round(time.Millisecond))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, by)
		defer cancel()
	}
	sent := time.Now()
	holder, err := read(ctx)
	switch {
	case err != nil && a.ConfirmBy != 0 && ctx.Err() != nil:
		return false, "its last confirmation ran out before the read answered"
	case err != nil || holder != session:
		return false, ""
	}
	if a.ConfirmBy != 0 {
		a.confirmBy = sent.Add(lockDelay / 2)
	}
	return true, ""
}

// beat records an update of the liveness check.
func (r *Runner) beat(at time.Time) {
	if r.lastBeat.Swap(at.UnixNano()) == 0 && r.opts.Adopt != nil && !r.opts.Adopt.LastBeat.IsZero() {
		r.beatGap.Store(int64(at.Sub(r.opts.Adopt.LastBeat)))
	}
}

// UpgradeGap is, after an upgrade in place, the longest time mariposa's
// liveness check went without an update across it: from the previous
// image's last update to this one's first. ok is false before that.
func (r *Runner) UpgradeGap() (gap time.Duration, ok bool) {
	g := r.beatGap.Load()
	return time.Duration(g), g != 0
}

// PIDs lists the processes handed over.
func (h *Handover) PIDs() []int {
	var pids []int
	for _, in := range h.Instances {
		if in.Proc != nil {
			pids = append(pids, in.Proc.Pid)
		}
	}
	return pids
}

// confirmBeforeExec bounds the fresh confirmation of the holds before the
// exec (Handover).
const confirmBeforeExec = 250 * time.Millisecond

// adoptWait is how long a handed-over instance of a count slot waits for
// the fleet to take its slot again before its process is stopped.
var adoptWait = 30 * time.Second

// dropUnadopted stops, after adoptWait, the processes handed over that no
// instance adopted (a count slot the fleet did not take again, a service
// removed from the files meanwhile): nothing runs that nobody supervises.
func (r *Runner) dropUnadopted(ctx context.Context) {
	select {
	case <-time.After(adoptWait):
	case <-ctx.Done():
		return
	}
	r.mu.Lock()
	left := r.pending
	r.pending = nil
	r.mu.Unlock()
	for key, a := range left {
		if a.Proc == nil {
			continue
		}
		r.log.Warn("a process handed over by the previous mariposa was not taken up again; stopping it", "instance", key, "pid", a.Proc.Pid)
		killHandedOver(key, a)
	}
}

// confirmSlot kills, at a.confirmBy, the process of an exclusive slot
// handed over that the fleet has not taken up by then (its own term, whose
// watchdog then guards the process): the previous image's watchdog would
// have killed it when its last confirmation got too old, and nothing else
// watches it meanwhile.
func (r *Runner) confirmSlot(ctx context.Context, key string, a *InstanceHandoff) {
	t := time.NewTimer(time.Until(a.confirmBy))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	r.mu.Lock()
	still := r.pending[key] == a
	if still {
		delete(r.pending, key)
	}
	r.mu.Unlock()
	if still {
		r.log.Warn("the exclusive slot handed over was not confirmed again in time; stopping its process", "instance", key, "slot", a.Slot, "pid", a.Proc.Pid)
		killHandedOver(key, a)
	}
}

// killHandedOver kills a process handed over that no instance took up.
func killHandedOver(key string, a *InstanceHandoff) {
	if p, err := proc.Adopt(*a.Proc, nil, key, nil); err == nil {
		_ = p.Signal(syscall.SIGKILL) // reaped through its pidfd
	} else {
		_ = syscall.Kill(-a.Proc.Pid, syscall.SIGKILL)
	}
}

// Adopting reports the count slots whose instances the previous image
// handed over and that wait for them: the fleet takes these slots again
// (same session, no write) instead of releasing them as strays.
func (r *Runner) Adopting() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, a := range r.pending {
		if a.Proc != nil && a.Slot != "" {
			out[a.Slot] = true
		}
	}
	return out
}

// slotsAwaitingAdoption: processes of count slots handed over by an
// upgrade in place still wait for the fleet to take their slots again.
// From the start, when the upgrade handed any over: until Run's start has
// confirmed them, they wait too.
func (r *Runner) slotsAwaitingAdoption() bool {
	handed := false
	if h := r.opts.Adopt; h != nil {
		for _, a := range h.Instances {
			handed = handed || a.Slot != "" && a.Proc != nil
		}
	}
	if !handed {
		return false
	}
	r.mu.Lock()
	set := r.pendingSet
	r.mu.Unlock()
	return !set || len(r.Adopting()) > 0
}

// awaitAdoption returns once no process of a count slot handed over waits
// for the fleet any more (taken up, or given up by dropUnadopted or
// confirmSlot, which bound the wait to adoptWait), or ctx ends.
func (r *Runner) awaitAdoption(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	limit := time.NewTimer(adoptWait)
	defer limit.Stop()
	for r.slotsAwaitingAdoption() {
		select {
		case <-t.C:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// monotonicNanos is t on CLOCK_MONOTONIC (monoclock), 0 when it cannot
// be read.
func monotonicNanos(t time.Time) int64 {
	ns, _ := monoclock.Nanos(t)
	return ns
}

// fromMonotonicNanos is the moment ns on this process's clock; now
// (treated as due) when the clock cannot be read.
func fromMonotonicNanos(ns int64) time.Time {
	if at, ok := monoclock.Time(ns); ok {
		return at
	}
	return time.Now()
}
