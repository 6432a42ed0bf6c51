package executor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/monoclock"
)

// An upgrade in place (website/upgrade.md) keeps the fleet's holds: the
// running image's executor hands over its session and holds (Handover)
// and does nothing more (no release, no destroy: the exec ends it); the
// next image's executor adopts them (Config.Adopt): it renews the session
// at once and watches it as its own, never creates one, and its agent
// starts with the holds running (agent.Adopt): no claim is sent, so the
// slot keys keep their ModifyIndex (the instances' fencing tokens), and
// the instances are not started again. The exclusive holds are confirmed
// at once, by the deadline the previous image's last confirmation gave
// them: Handover confirms them afresh just before the exec (as
// internal/lease's ConfirmNow), so the new image gets the whole
// lock_delay/2 the rule allows.

// Handover is what an executor hands to the next image of mariposa (the
// upgrade state's "fleet" part; JSON).
type Handover struct {
	Node    string `json:"node"`
	Session string `json:"session"`
	// TTL and LockDelay are the session's: the adopting executor uses
	// them (the watchdog's bounds are the session's lock delay's).
	TTL       time.Duration `json:"ttl"`
	LockDelay time.Duration `json:"lock_delay"`
	Slots     []HandedSlot  `json:"slots"`
}

// HandedSlot is one hold handed over.
type HandedSlot struct {
	Unit string `json:"unit"`
	K    int    `json:"k"`
	// Index is the fencing token: the slot key's ModifyIndex at the
	// claim (MARIPOSA_SLOT_INDEX), unchanged across the upgrade.
	Index     uint64 `json:"index"`
	Exclusive bool   `json:"exclusive,omitempty"`
	Version   string `json:"version,omitempty"`
	Volumes   bool   `json:"volumes,omitempty"`
	// Confirmed is the send time of the last consistent read that showed
	// an exclusive hold, on CLOCK_MONOTONIC in nanoseconds (the same
	// clock in both images); 0: none.
	Confirmed int64 `json:"confirmed_monotonic_ns,omitempty"`
}

// Slot is the hold's slot.
func (s HandedSlot) Slot() agent.SlotID { return agent.SlotID{Unit: s.Unit, K: s.K} }

// handoverReq asks the loop for its handover; the loop then waits for
// resume (the upgrade failed: it goes on) or the end (the exec, a Kill).
type handoverReq struct {
	ctx    context.Context
	reply  chan handoverAns
	resume chan struct{}
}

type handoverAns struct {
	h   *Handover
	err error
}

// Handover parks the executor's loop and returns what the next image
// adopts: the session and the holds whose instances run, each exclusive
// one confirmed afresh (one consistent read bounded by ctx and the lock
// delay; without an answer, the last periodic confirmation counts). From
// then on the executor steps nothing (the instances are parked by the
// runner too) until thaw, which undoes it (the upgrade failed), or the
// exec. Nothing is released or destroyed.
func (e *Executor) Handover(ctx context.Context) (*Handover, func(), error) {
	req := handoverReq{ctx: ctx, reply: make(chan handoverAns, 1), resume: make(chan struct{})}
	e.inbox.post(req)
	var ans handoverAns
	select {
	case ans = <-req.reply:
	case <-e.done:
		return nil, nil, errors.New("the fleet's executor has ended")
	case <-ctx.Done():
		// The loop may answer later: it then resumes at once.
		close(req.resume)
		return nil, nil, ctx.Err()
	}
	if ans.err != nil {
		close(req.resume)
		return nil, nil, ans.err
	}
	var once sync.Once
	return ans.h, func() { once.Do(func() { close(req.resume) }) }, nil
}

// handover answers req in the loop, then parks it.
func (e *Executor) handover(req handoverReq) {
	if e.stopping {
		req.reply <- handoverAns{err: errors.New("the fleet's executor is stopping")}
		return
	}
	ad := e.ag.Handover()
	if ad.Session == "" {
		req.reply <- handoverAns{err: errors.New("the fleet's executor has no session")}
		return
	}
	// A fresh confirmation of the exclusive holds (internal/lease's
	// ConfirmNow before the exec).
	var excl []agent.SlotID
	for _, s := range ad.Slots {
		if s.Exclusive {
			excl = append(excl, s.Slot)
		}
	}
	if len(excl) > 0 {
		ctx, cancel := context.WithTimeout(req.ctx, e.cfg.LockDelay/4)
		sent := time.Now()
		held, err := e.readHeld(ctx, excl, ad.Session)
		cancel()
		for i, s := range ad.Slots {
			if err == nil && held[s.Slot] && s.Exclusive {
				ad.Slots[i].Confirmed = sent
			}
		}
	}
	h := &Handover{Node: e.cfg.Node, Session: ad.Session, TTL: e.cfg.TTL, LockDelay: e.cfg.LockDelay}
	for _, s := range ad.Slots {
		hs := HandedSlot{Unit: s.Slot.Unit, K: s.Slot.K, Index: s.Index, Exclusive: s.Exclusive, Version: s.Version, Volumes: s.Volumes}
		if s.Exclusive && !s.Confirmed.IsZero() {
			hs.Confirmed = monotonicNanos(s.Confirmed)
		}
		h.Slots = append(h.Slots, hs)
	}
	req.reply <- handoverAns{h: h}
	select {
	case <-req.resume:
	case <-e.killed:
		// Handed over: nothing more is stepped or done (the inputs
		// already queued included).
		e.stopped = true
	}
}

// adoptConfig fills cfg from cfg.Adopt: the session's TTL and lock delay
// are the ones that count.
func adoptConfig(cfg *Config) {
	h := cfg.Adopt
	if h == nil {
		return
	}
	if h.TTL > 0 {
		cfg.TTL = h.TTL
	}
	if h.LockDelay > 0 {
		cfg.LockDelay = h.LockDelay
	}
}

// agentAdopt is the agent's adoption (agent.Config.Adopt), nil without.
func (e *Executor) agentAdopt() *agent.Adopt {
	h := e.cfg.Adopt
	if h == nil || h.Session == "" {
		return nil
	}
	ad := &agent.Adopt{Session: h.Session}
	for _, s := range h.Slots {
		as := agent.AdoptSlot{Slot: s.Slot(), Index: s.Index, Exclusive: s.Exclusive, Version: s.Version, Volumes: s.Volumes}
		if s.Confirmed != 0 {
			as.Confirmed = fromMonotonicNanos(s.Confirmed)
		}
		ad.Slots = append(ad.Slots, as)
	}
	return ad
}

// startAdopted, from Start: the adopted session is renewed at once (gone:
// the agent is told, and the holds end as for any session lost) and
// watched as one this executor created.
func (e *Executor) startAdopted() {
	id := e.ag.Session()
	if e.cfg.Adopt == nil || id == "" {
		return
	}
	e.startSession(id)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Request)
		defer cancel()
		entry, _, err := e.cfg.Client.Session().Renew(id, (&api.WriteOptions{}).WithContext(ctx))
		switch {
		case err != nil:
			e.log.Warn("cannot renew the session handed over; renewing it again later", "session", id, "error", err)
		case entry == nil:
			e.log.Warn("the session handed over is gone; its holds are lost", "session", id)
			e.inbox.post(sessionGone{id: id})
		default:
			e.log.Info("session adopted from the previous image", "session", id, "slots", len(e.cfg.Adopt.Slots))
		}
	}()
}

// firstInput is the loop's first step: with an adoption, a wake-up (its
// units come with SetUnits; an empty UnitsAnswer would stop the holds).
func (e *Executor) firstInput() any {
	if e.cfg.Adopt != nil && e.cfg.Adopt.Session != "" {
		return agent.Tick{}
	}
	return agent.UnitsAnswer{}
}

// monotonicNanos is t on CLOCK_MONOTONIC (monoclock), 0 when it cannot
// be read.
func monotonicNanos(t time.Time) int64 {
	ns, _ := monoclock.Nanos(t)
	return ns
}

// fromMonotonicNanos is the moment ns on this process's clock; the zero
// time (no confirmation) when the clock cannot be read.
func fromMonotonicNanos(ns int64) time.Time {
	at, _ := monoclock.Time(ns)
	return at
}
