package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/lease"
)

// errNotAdoptable: the slot to take again is free (its session's hold
// ended meanwhile): adoption takes only what the session still holds.
var errNotAdoptable = errors.New("the slot is no longer held by this node's session")

// adoptSlots takes again, after an upgrade in place, the slots whose
// instances the previous image handed over (FleetConfig.Adopting), once the
// watchers show them held by this node's session, which the lease adopted:
// the acquire finds the key already held by the session and writes
// nothing, so the slot keeps its lock index, and no other node ever sees it
// free. A slot no longer held so is not taken (the claim refuses a free
// key); its instance waits, then is stopped by the runner. It says
// whether it took any (the runner is handed them).
func (f *Fleet) adoptSlots(ctx context.Context) bool {
	if f.cfg.Adopting == nil || f.cfg.Lease == nil {
		return false
	}
	want := f.cfg.Adopting()
	if len(want) == 0 {
		return false
	}
	took := false
	mine := f.cfg.Lease.Session()
	type adoptee struct {
		id    string
		u     UnitSpec
		k     int
		value SlotValue
	}
	var due []adoptee
	f.mu.Lock()
	units := f.unitsLocked()
	for id := range want {
		if _, held := f.held[id]; held {
			continue
		}
		unit, k, err := ParseSlot(id)
		if err != nil {
			continue
		}
		u, ok := units[unit]
		s, seen := f.slots[unit][k]
		if !ok || !seen || mine == "" || s.session != mine {
			continue // not (yet) seen held by this session
		}
		due = append(due, adoptee{id: id, u: u, k: k, value: s.value})
	}
	f.mu.Unlock()
	for _, a := range due {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := f.cfg.Lease.TryAcquire(cctx, lease.Hold{
			Key:         SlotKey(a.u.Unit.Name, a.k),
			Unconfirmed: !a.u.exclusive(),
			Log:         f.log.With("slot", a.id),
			Claim: func(*api.KVPair) ([]byte, api.TxnOps, error) {
				return nil, nil, errNotAdoptable
			},
		})
		cancel()
		if err != nil {
			f.log.Warn("could not take a slot again after the upgrade", "slot", a.id, "error", err)
			continue
		}
		h := &heldSlot{unit: a.u, k: a.k, term: t, value: a.value}
		if vols, _ := volumesOf(a.u); len(vols) > 0 {
			// The instance runs on its volumes already.
			h.volumesReady, h.volumeNote = true, "kept across an upgrade in place"
		}
		f.mu.Lock()
		f.held[a.id] = h
		delete(f.vacant, a.id)
		delete(f.strays, a.id)
		f.mu.Unlock()
		took = true
		f.log.Info("slot taken again after an upgrade in place", "slot", a.id, "term_index", t.Index)
		go func() {
			select {
			case <-t.Lost():
				f.wake()
			case <-ctx.Done():
			}
		}()
	}
	return took
}
