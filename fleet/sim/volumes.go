package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/volume"
)

// Volumes (Config.Volumes): every exclusive unit has one volume that moves
// with its slots (handoff = "snapshot", on_missing = "latest"), performed
// as fleet/executor does: the handoff is cluster's value at cluster's key
// (HandoffKey), written in a transaction fenced by the hold; a restore
// reads it and chooses with cluster.ChooseData.
//
// The model of a volume: each node's copy of each slot's data is its
// generation (the fencing index of the term that wrote it; a copy survives
// mariposa's restarts, not the node's loss). A restore takes 100-300 ms of
// transfer from the node that serves the chosen copy, which must be up. An
// instance starts with the generation its restore gave it and writes its
// term's from then on.
//
// Invariants, checked at every instance's start:
//   - no instance of a slot with volumes starts before its restore for its
//     term is done (the restore's answer came back OK);
//   - a graceful handoff is never lost: the slot's next instance starts
//     with a generation at least the one its last graceful holder (one
//     that released the slot after its instance ran) had, unless that
//     holder no longer serves it (its node or its mariposa is down: the
//     data is there, unreachable, and on_missing applies); once an
//     instance has started from it, it is delivered (a later loss is an
//     unplanned one).
//
// A slot whose data waits on a holder that no longer serves it may stay
// without an instance (its restores fail and pass the handoff on): the
// final check of the full count does not count it.

type nodeSlot struct {
	node string
	slot agent.SlotID
}

type restoreRec struct {
	index uint64 // the term it was for
	from  uint64 // the generation it started the data from
}

type graceful struct {
	gen  uint64
	node *node
}

type simVolumes struct {
	data     map[nodeSlot]uint64     // each node's copy: its generation
	restored map[nodeSlot]restoreRec // the last restore done, per node and slot
	ran      map[nodeSlot]uint64     // a started instance's term, until released
	graceful map[agent.SlotID]graceful
	byName   map[string]*node
	// restoring: the latest restore started per node and slot: an
	// earlier one still on its way is cancelled by it (the executor
	// cancels it and waits for it to end before the next begins), so it
	// changes no data.
	restoring map[nodeSlot]uint64
	seq       uint64
}

// VolumeStats: what the volumes did in a run.
type VolumeStats struct {
	Handoffs, Forwards, Restores, RestoreFailed, FromHandoff, Kept, Unplanned uint64
}

const simSHA = "0000000000000000000000000000000000000000000000000000000000000000"

func (s *Sim) volumesInit() {
	s.vol = &simVolumes{data: map[nodeSlot]uint64{}, restored: map[nodeSlot]restoreRec{}, ran: map[nodeSlot]uint64{},
		graceful: map[agent.SlotID]graceful{}, byName: map[string]*node{}, restoring: map[nodeSlot]uint64{}}
	for _, n := range s.nodes {
		s.vol.byName[n.name] = n
	}
	// The placed start: each holder's copy is its term's.
	for id, insts := range s.running {
		if !s.byU[id.Unit].Volumes {
			continue
		}
		for _, inst := range insts {
			k := nodeSlot{inst.node.name, id}
			s.vol.data[k] = inst.index
			s.vol.restored[k] = restoreRec{index: inst.index, from: inst.index}
			s.vol.ran[k] = inst.index
		}
	}
}

// serves: n's node API is up to serve its copies.
func serves(n *node) bool { return n != nil && n.alive && n.up }

func (s *Sim) readHandoff(id agent.SlotID) *cluster.Handoff {
	e, _, _ := s.store.Get(cluster.HandoffKey(id.Unit, id.K), false)
	if e == nil {
		return nil
	}
	ho, err := cluster.DecodeHandoff(e.Value)
	if err != nil {
		s.violate("handoff of %s cannot be read: %v", id, err)
		return nil
	}
	return &ho
}

// actVolumes performs the volumes' actions; false: not one.
func (s *Sim) actVolumes(n *node, a any) bool {
	switch a := a.(type) {
	case agent.Restore:
		s.restore(n, a)
	case agent.PushHandoff:
		s.pushHandoff(n, a)
	default:
		return false
	}
	return true
}

func (s *Sim) restore(n *node, a agent.Restore) {
	gen := n.gen
	d := s.latency() + 100*time.Millisecond + time.Duration(s.rng.Int64N(int64(200*time.Millisecond)))
	k := nodeSlot{n.name, a.Slot}
	s.vol.seq++
	seq := s.vol.seq
	s.vol.restoring[k] = seq
	s.at(d, func() {
		if n.gen != gen || !n.alive {
			return
		}
		if s.vol.restoring[k] != seq {
			return // cancelled by a later restore of the slot
		}
		delete(s.vol.restoring, k)
		fail := func(why string) {
			s.res.Volumes.RestoreFailed++
			s.note("%s restore %s failed: %s", n.name, a.Slot, why)
			s.step(n, agent.RestoreDone{Slot: a.Slot, Index: a.Index, Note: why})
		}
		if !n.watched() || !s.store.HasLeader() {
			fail("no consistent read of the slot")
			return
		}
		e, _, _ := s.store.Get(a.Slot.Key(), false)
		if e == nil || e.Session != a.Session {
			fail("the slot is not held by this session")
			return
		}
		ho := s.readHandoff(a.Slot)
		local := s.vol.data[k]
		prev := ""
		if c, _, _ := s.store.Get(a.Slot.ClaimedKey(), false); ho != nil || local != 0 || c != nil && c.CreateIndex < a.Index {
			prev = "?" // held before, by whom the sim's agent does not say (the executor's rule)
		}
		choice, _ := cluster.ChooseData(cluster.DataCandidates{Self: n.name, LockIndex: e.LockIndex, Term: a.Index, PrevNode: prev, Handoff: ho, Local: local})
		var from uint64
		switch choice {
		case cluster.DataEmpty:
		case cluster.DataKeep:
			from = local
			s.res.Volumes.Kept++
		case cluster.DataRestore:
			if !serves(s.vol.byName[ho.Node]) {
				fail("the handoff's node " + ho.Node + " does not serve it")
				return
			}
			from = ho.TermIndex
			s.res.Volumes.FromHandoff++
			s.ackHandoff(n, a, ho)
		default:
			// on_missing = "latest": the newest copy that can be reached.
			s.res.Volumes.Unplanned++
			from = local
			if ho != nil && ho.Node != n.name && ho.TermIndex > from && serves(s.vol.byName[ho.Node]) {
				from = ho.TermIndex
			}
		}
		s.res.Volumes.Restores++
		s.vol.data[k] = a.Index // the term's generation from now on
		s.vol.restored[k] = restoreRec{index: a.Index, from: from}
		s.note("%s restore %s (token %d) done: choice %d from generation %d", n.name, a.Slot, a.Index, choice, from)
		s.step(n, agent.RestoreDone{Slot: a.Slot, Index: a.Index, OK: true})
	})
}

// ackHandoff writes the restore's acknowledgement into the handoff it
// restored (its Restored, CAS on the handoff, with the slot's session
// checked), as the executor writes it with the restore's record: the
// handoff is then not planned for a later term (cluster's Handoff.PlannedFor).
func (s *Sim) ackHandoff(n *node, a agent.Restore, ho *cluster.Handoff) {
	key := cluster.HandoffKey(a.Slot.Unit, a.Slot.K)
	he, _, _ := s.store.Get(key, false)
	if he == nil {
		return
	}
	acked := *ho
	acked.Restored = &cluster.HandoffAck{Node: n.name, TermIndex: a.Index, At: s.wall()}
	b, err := json.Marshal(acked)
	if err != nil {
		panic(err)
	}
	r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{
		{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session},
		{Verb: api.KVCAS, Key: key, Value: b, Index: he.ModifyIndex},
	})
	s.countTxn(r, err)
}

func (s *Sim) pushHandoff(n *node, a agent.PushHandoff) {
	s.note("%s push handoff %s ready=%v", n.name, a.Slot, a.Ready)
	s.rpc(n, func() any {
		e, _, _ := s.store.Get(a.Slot.Key(), false)
		if e == nil || e.Session != a.Session {
			return agent.HandoffDone{Slot: a.Slot, GiveUp: true, Note: "the slot is not held by this session"}
		}
		var ho cluster.Handoff
		if a.Ready {
			ho = cluster.Handoff{Node: n.name, URL: "sim://" + n.name, LockIndex: e.LockIndex, TermIndex: a.Index, At: s.wall(),
				Volumes: map[string]volume.Meta{"data": {SHA256: simSHA, Size: 1}}}
		} else {
			old := s.readHandoff(a.Slot)
			if old == nil || !old.PlannedFor(e.LockIndex, a.Index) {
				return agent.HandoffDone{Slot: a.Slot, OK: true, Note: "nothing to pass on"}
			}
			ho = *old
			ho.LockIndex, ho.ForwardedBy, ho.Restored = e.LockIndex, n.name, nil
		}
		b, err := json.Marshal(ho)
		if err != nil {
			panic(err)
		}
		r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session},
			{Verb: api.KVCheckIndex, Key: a.Slot.Key(), Index: a.Index},
			{Verb: api.KVSet, Key: cluster.HandoffKey(a.Slot.Unit, a.Slot.K), Value: b},
		})
		s.countTxn(r, err)
		if err != nil || !r.OK {
			return agent.HandoffDone{Slot: a.Slot, GiveUp: err == nil, Note: fmt.Sprint(err, r.Errors)}
		}
		if a.Ready {
			s.res.Volumes.Handoffs++
		} else {
			s.res.Volumes.Forwards++
		}
		s.note("%s handoff %s ready=%v lock %d generation %d", n.name, a.Slot, a.Ready, ho.LockIndex, ho.TermIndex)
		return agent.HandoffDone{Slot: a.Slot, OK: true}
	}, func() any { return agent.HandoffDone{Slot: a.Slot, Note: "no answer"} })
}

// volReleasing: the slot key as it is before n's release is applied (its
// ModifyIndex is the hold's token); volReleased after the release applied.
func (s *Sim) volReleasing(id agent.SlotID) uint64 {
	if !s.byU[id.Unit].Volumes {
		return 0
	}
	e, _, _ := s.store.Get(id.Key(), false)
	if e == nil {
		return 0
	}
	return e.ModifyIndex
}

// volReleased: n released id, whose token was token: if its instance ran
// in that term, the release was graceful and its data must follow.
func (s *Sim) volReleased(n *node, id agent.SlotID, token uint64) {
	if !s.byU[id.Unit].Volumes {
		return
	}
	k := nodeSlot{n.name, id}
	if t, ok := s.vol.ran[k]; ok && t == token {
		s.vol.graceful[id] = graceful{gen: t, node: n}
	}
	delete(s.vol.ran, k)
}

// volStopped: a kill is no graceful stop: a later release of the slot by
// n (a stray's) hands nothing off, and its data is lost with the hold as
// on_missing says.
func (s *Sim) volStopped(n *node, a agent.Stop) {
	if s.vol != nil && a.Kill {
		delete(s.vol.ran, nodeSlot{n.name, a.Slot})
	}
}

// volStart checks an instance's start against its restore.
func (s *Sim) volStart(n *node, a agent.Start) {
	if s.vol == nil || !s.byU[a.Slot.Unit].Volumes {
		return
	}
	k := nodeSlot{n.name, a.Slot}
	r, ok := s.vol.restored[k]
	if !ok || r.index != a.Index {
		s.violate("slot %s: %s starts its instance (token %d) before its restore is done", a.Slot, n.name, a.Index)
		return
	}
	// An update in place starts the hold's instance again on the data
	// its restore chose: whether a handoff was lost was judged at the
	// hold's first start (the handoff's node may serve again only since:
	// seed 136 of TestSimulation's config, a revert after its restart).
	again := s.vol.ran[k] == a.Index
	s.vol.ran[k] = a.Index
	if g, ok := s.vol.graceful[a.Slot]; ok && !again && r.from < g.gen && serves(g.node) {
		s.violate("slot %s: the handoff of generation %d by %s is lost: %s starts from generation %d", a.Slot, g.gen, g.node.name, n.name, r.from)
	} else if ok && r.from >= g.gen {
		// Delivered: an instance runs from the handoff's data (or newer),
		// which its old holder serves no more once restored. A later loss
		// of this holder is an unplanned one (on_missing), not this
		// handoff's (-ops seed 97: the restorer, lost, and the next holder
		// started from what on_missing found).
		delete(s.vol.graceful, a.Slot)
	}
}

// volWaiting: id has no instance because its data waits on a holder that
// no longer serves it.
func (s *Sim) volWaiting(id agent.SlotID) bool {
	if s.vol == nil {
		return false
	}
	g, ok := s.vol.graceful[id]
	return ok && !serves(g.node)
}

// Add adds o's figures to v's.
func (v *VolumeStats) Add(o VolumeStats) {
	v.Handoffs += o.Handoffs
	v.Forwards += o.Forwards
	v.Restores += o.Restores
	v.RestoreFailed += o.RestoreFailed
	v.FromHandoff += o.FromHandoff
	v.Kept += o.Kept
	v.Unplanned += o.Unplanned
}

// String is the volumes' figures in a line.
func (v VolumeStats) String() string {
	return fmt.Sprintf("handoffs %d forwards %d restores %d (failed %d, from a handoff %d, kept %d, unplanned %d)",
		v.Handoffs, v.Forwards, v.Restores, v.RestoreFailed, v.FromHandoff, v.Kept, v.Unplanned)
}
