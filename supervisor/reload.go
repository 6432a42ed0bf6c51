package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// Coordinated reloads. A template with a coordinate block does not restart
// or signal its instance as soon as a change is rendered: the instance asks
// for a reload token first (actAcquireReload), named by its unit and a hash
// of what the coordinated templates rendered, so every instance that saw
// the same KV write contends on the same semaphore of max_parallel tokens.
// The new file is on disk at once; only the restart or signal waits. Once
// the token is granted (inReloadGranted) the instance restarts or signals,
// and gives the token back (actReleaseReload) once it is running again with
// every check passing on a status about the reloaded process (at once
// without checks), or as soon as it stops, fails or leaves its slot. A
// newer change while waiting replaces the request; a newer change while
// holding is asked for once the held token is back. A process that starts
// for another reason (a crash, a health restart, an operator) reads the new
// files anyway: the request still waiting is dropped.

// ReloadRequest asks for a token of a coordinated template reload.
type ReloadRequest struct {
	// Service is the instance's service, Unit the slot's unit (a service
	// or a group), or the service's name outside count slots.
	Service string
	Unit    string
	// Slot is the count slot the instance runs in; nil if none.
	Slot *SlotInfo
	// Session is the session to contend with: the slot's for an instance
	// in a count slot, else the node lease's ("" when the node has none:
	// the gate then makes one of its own).
	Session string
	// Hash names the change: a hash of what every coordinated template of
	// the instance rendered. Instances that rendered the same data have
	// the same hash.
	Hash string
	// Limit is max_parallel: how many instances hold a token at once.
	Limit int
}

// ReloadGate hands out reload tokens (coord is the Consul one).
type ReloadGate interface {
	// Acquire blocks until req's token is granted, and returns the func
	// that gives it back; or until ctx ends, with ctx's error; or fails
	// (the caller retries). The gate gives the token back by itself when
	// it is lost (its session ended); release may be called more than
	// once.
	Acquire(ctx context.Context, req ReloadRequest) (release func(), err error)
}

// reloadReq is a coordinated reload, waiting for its token or holding it.
type reloadReq struct {
	seq   uint64 // 0: not asked for yet (nextReload)
	hash  string
	limit int
	// restart says why, when the reload restarts the process; else it
	// sends signals.
	restart string
	signals []syscall.Signal
	why     string    // what changed, for the reason and events
	granted bool      // the token is held
	at      time.Time // when the token came (and the reload acted)
}

// merge adds a later change's actions: a restart covers any signal.
func (r *reloadReq) merge(restart string, signals []syscall.Signal) {
	if restart != "" {
		r.restart = restart
	}
	for _, sig := range signals {
		if !slices.Contains(r.signals, sig) {
			r.signals = append(r.signals, sig)
		}
	}
	r.why = r.restart
	if r.why == "" {
		names := make([]string, len(r.signals))
		for i, sig := range r.signals {
			names[i] = proc.SignalName(sig)
		}
		r.why = "a template changed (" + strings.Join(names, ", ") + ")"
	}
}

// coordinated: t's changes wait for a reload token.
func coordinated(t *schema.Template) bool {
	if t.Coordinate == nil {
		return false
	}
	return t.Env || t.ChangeMode == "restart" || t.ChangeMode == "" || t.ChangeMode == "signal"
}

// coordHash names what svc's coordinated templates rendered (hashes are
// per template, render.ServiceState.Hashes), and limit is the smallest
// max_parallel among them. The limit is part of the hash: instances that
// disagree on it (files of two versions) never share a semaphore, which
// would refuse the second limit.
func coordHash(svc *schema.Service, hashes []string) (hash string, limit int) {
	h := sha256.New()
	for i, t := range svc.Templates {
		if !coordinated(t) {
			continue
		}
		rendered := ""
		if i < len(hashes) {
			rendered = hashes[i]
		}
		fmt.Fprintf(h, "%d:%s\n", i, rendered)
		if n := max(t.Coordinate.MaxParallel, 1); limit == 0 || n < limit {
			limit = n
		}
	}
	limit = max(limit, 1)
	fmt.Fprintf(h, "limit:%d\n", limit)
	return hex.EncodeToString(h.Sum(nil)[:8]), limit
}

// askReload: coordinated templates changed while the process runs.
func (st *stepper) askReload(hashes []string, restart string, signals []syscall.Signal) {
	s := st.s
	hash, limit := coordHash(s.svc, hashes)
	if cur := s.reload; cur != nil && cur.granted {
		// The token held is for an earlier change: ask for this one once
		// it is given back.
		n := s.nextReload
		if n == nil {
			n = &reloadReq{}
			s.nextReload = n
		}
		n.hash, n.limit = hash, limit
		n.merge(restart, signals)
		return
	}
	r := s.reload
	if r == nil {
		r = &reloadReq{}
		s.reload = r
	} else if r.hash == hash {
		r.merge(restart, signals)
		st.setRunning()
		return
	} else {
		// A newer change while waiting: wait for the newest only.
		st.do(action{kind: actReleaseReload, seq: r.seq})
	}
	r.hash, r.limit = hash, limit
	r.merge(restart, signals)
	st.acquire(r)
}

// acquire asks for r's token.
func (st *stepper) acquire(r *reloadReq) {
	s := st.s
	s.reloadSeq++
	r.seq = s.reloadSeq
	req := ReloadRequest{Service: s.svc.Name, Unit: s.svc.Name, Hash: r.hash, Limit: r.limit}
	if s.slot != nil {
		sl := *s.slot
		req.Slot, req.Unit, req.Session = &sl, sl.Unit, sl.Session
	}
	st.emit(EventReloadWaiting, fmt.Sprintf("%s; waiting for a reload token (%s, max_parallel %d)", r.why, r.hash, r.limit))
	st.do(action{kind: actAcquireReload, seq: r.seq, reload: req})
	st.setRunning()
}

// reloadGranted: the token of request seq came.
func (st *stepper) reloadGranted(seq uint64) {
	s := st.s
	r := s.reload
	if r == nil || r.seq != seq {
		st.do(action{kind: actReleaseReload, seq: seq}) // stale: no longer wanted
		return
	}
	if r.granted {
		return
	}
	r.granted, r.at = true, st.now
	st.emit(EventReloadGranted, r.why)
	if s.pid == 0 || s.stopping || s.shutdown {
		// Nothing runs on the old files: the next start reads the new ones.
		st.endReload("nothing to reload")
		return
	}
	if r.restart != "" {
		st.restartNow(r.restart)
		return
	}
	for _, sig := range r.signals {
		st.emit(EventSignalled, proc.SignalName(sig))
		st.do(action{kind: actSignal, sig: sig})
	}
	st.setRunning()
	st.maybeReleaseReload()
}

// maybeReleaseReload gives the held token back once the reloaded instance
// is running with every check passing on a status about the reload (at
// once without checks); else it arms a look again when one is due.
func (st *stepper) maybeReleaseReload() {
	s := st.s
	r := s.reload
	if r == nil || !r.granted || s.pid == 0 || s.stopping || s.state != StateRunning {
		return
	}
	ref := r.at
	if r.restart != "" {
		if s.started.Before(r.at) {
			return // still the process from before the token
		}
		ref = s.started
	}
	ok, recheck := checksFresh(s.tracks, s.svc, ref, st.now)
	if !ok {
		if recheck > 0 {
			st.arm(timerReload, recheck)
		}
		return
	}
	st.disarm(timerReload)
	st.emit(EventReloadReleased, "running with its checks passing")
	st.do(action{kind: actReleaseReload, seq: r.seq})
	s.reload = nil
	if n := s.nextReload; n != nil {
		s.nextReload = nil
		st.acquire(n)
		return
	}
	st.setRunning()
}

// dropWaitingReload: a process is about to start, or to stop for another
// reason; the next one reads every file anew, so a reload not yet granted
// is moot. A held token stays until that process is healthy.
func (st *stepper) dropWaitingReload() {
	s := st.s
	s.nextReload = nil
	if r := s.reload; r != nil && !r.granted {
		st.do(action{kind: actReleaseReload, seq: r.seq})
		s.reload = nil
	}
}

// endReload gives back whatever token is held or asked for.
func (st *stepper) endReload(why string) {
	s := st.s
	s.nextReload = nil
	r := s.reload
	if r == nil {
		return
	}
	s.reload = nil
	st.disarm(timerReload)
	st.do(action{kind: actReleaseReload, seq: r.seq})
	if r.granted {
		st.emit(EventReloadReleased, why)
	}
}

// settleReload, after each step: an instance that will not run again
// soon (stopping for good, failed, out of its slot, a standby, waiting)
// holds no token and asks for none.
func (st *stepper) settleReload() {
	s := st.s
	if s.reload == nil && s.nextReload == nil {
		return
	}
	switch {
	case s.shutdown:
		st.endReload("stopping")
	case s.slot != nil && s.slotLost != "":
		st.endReload(s.slotLost)
	case s.state == StateFailed || s.state == StateCompleted || s.state == StateStandby ||
		s.state == StateStopped || s.state == StateWaiting:
		st.endReload(string(s.state))
	}
}

// checksFresh: every check of svc is passing, on a status about what ran
// since ref: it turned passing at or after ref, or has had time to report
// since ref (and since it was registered). Without checks: true. When
// only time is missing, recheck says when to look again.
func checksFresh(tracks map[string]*checkTrack, svc *schema.Service, ref, now time.Time) (ok bool, recheck time.Duration) {
	if len(tracks) != len(svc.Checks) {
		return false, 0 // not every check seen yet: the next health view says
	}
	ok = true
	for _, c := range tracks {
		if c.Status != api.HealthPassing {
			ok, recheck = false, 0
			break
		}
		if !c.PassingSince.IsZero() && !c.PassingSince.Before(ref) {
			continue
		}
		from := ref
		if c.FirstSeen.After(from) {
			from = c.FirstSeen
		}
		if at := from.Add(c.StaleAfter); now.Before(at) {
			ok = false
			if d := at.Sub(now); recheck == 0 || d > recheck {
				recheck = d
			}
		}
	}
	if !ok {
		return false, recheck
	}
	return true, 0
}
