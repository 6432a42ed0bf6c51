package agent

import (
	"sort"
	"time"
)

// An upgrade in place (website/upgrade.md): the running mariposa re-execs
// its binary with its children running, and the fleet's holds stay held
// by the same session. The next image's agent starts from what the
// previous one handed over (Config.Adopt) instead of creating a session:
// the session, and each hold with its fencing token, in phase running (the
// instance runs already: no Claim, no Start, the key is not written, so
// the token the instance was given stays valid). From there everything is
// as for any hold:
//
//   - an exclusive hold keeps the watchdog's deadline its last
//     confirmation by the previous image gave it (Confirmed +
//     lock_delay/2): the first Confirm goes out at once, and without an
//     answer by then the instance is killed, as the previous image would
//     have;
//   - a read sent after that confirmation that does not show the hold,
//     a view showing the slot held by another session since, or the
//     session lost, ends it (killed, not released);
//   - a slot the session holds in Consul that was not handed over (an
//     instance that was starting or stopping) is a stray, released when a
//     view shows it;
//   - the holds are not stopped for want of a unit until the first
//     UnitsAnswer (the executor gives the units once it has read them).

// Adopt is what the previous image handed over.
type Adopt struct {
	Session string
	Slots   []AdoptSlot
}

// AdoptSlot is one hold handed over.
type AdoptSlot struct {
	Slot SlotID
	// Index is the fencing token (the key's ModifyIndex at the claim).
	Index     uint64
	Exclusive bool
	// Version is the version the instance runs at ("" none); Volumes: its
	// unit's volumes were readied for this hold.
	Version string
	Volumes bool
	// Confirmed is the send time of the last consistent read that showed
	// an exclusive hold, on this process's clock (zero: none: the
	// watchdog's deadline has passed).
	Confirmed time.Time
}

// adopt starts the agent from what the previous image handed over.
func (a *Agent) adopt(ad *Adopt) {
	a.session = ad.Session
	a.adoptWait = true
	for _, s := range ad.Slots {
		h := &held{phase: Running, exclusive: s.Exclusive, index: s.Index, volReady: true, volumes: s.Volumes,
			// A read sent after the last one that showed the hold and
			// that does not show it ends it (acked: ConfirmDone).
			confirmed: s.Confirmed, acked: s.Confirmed, sent: s.Confirmed}
		if h.acked.IsZero() {
			// No confirmation known: any read that does not show it
			// ends it.
			h.acked = time.Unix(0, 1)
		}
		a.held[s.Slot] = h
		if s.Version != "" {
			d := a.deps()
			d.holds[s.Slot] = &holdDeploy{version: s.Version, stamped: s.Version, token: -1}
		}
	}
	a.heldChanged()
}

// Handover is what the next image adopts (Config.Adopt): the session and
// the holds whose instance runs or starts, in slot order. A hold being
// claimed, stopped, released, restored or handed off, lost, or orphaned
// is not handed over: the next image releases it as a stray if Consul
// still shows it this session's.
func (a *Agent) Handover() Adopt {
	out := Adopt{Session: a.session}
	if a.session == "" {
		return out
	}
	for _, id := range a.heldIDs() {
		h := a.held[id]
		if h.lost || h.orphan || (h.phase != Running && h.phase != Starting && h.phase != Updating) {
			continue
		}
		s := AdoptSlot{Slot: id, Index: h.index, Exclusive: h.exclusive, Volumes: h.volumes, Confirmed: h.confirmed}
		if a.dep != nil {
			if hd := a.dep.holds[id]; hd != nil {
				s.Version = hd.version
			}
		}
		out.Slots = append(out.Slots, s)
	}
	sort.Slice(out.Slots, func(i, j int) bool {
		x, y := out.Slots[i].Slot, out.Slots[j].Slot
		if x.Unit != y.Unit {
			return x.Unit < y.Unit
		}
		return x.K < y.K
	})
	return out
}

// waitsForUnits: an adopted agent has not heard its units yet; its holds
// are not scaled down for want of them.
func (a *Agent) waitsForUnits() bool { return a.adoptWait }
