package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
)

// Volumes (agent.Restore, agent.PushHandoff) are performed with
// internal/volume's store, on cluster's keys and values
// (cluster.HandoffKey, cluster.Handoff):
//
//   - Restore: the volumes' directories ensured; for the volumes that
//     move (handoff = "snapshot"), a consistent read of the slot key (its
//     LockIndex; still this session's) and of the handoff, the
//     generation of this node's copy, and cluster.ChooseData: keep this
//     node's copy, restore the planned handoff from the node that serves
//     it (its node API, with the session in the request), start empty, or
//     on_missing ("fail": RestoreDone.Missing; "empty"; "latest": the
//     newest copy there is, cluster.RestoreLatest: a periodic copy on
//     another node, this node's own, or the last handoff's snapshot where
//     its node still serves it). Then the generation is this term's fencing
//     index, and a restored handoff is acknowledged (its Restored, CAS on
//     the handoff) with the restore's audit record. A new Restore of a
//     slot cancels the one on its way and waits for it to end: two never
//     write one directory.
//   - PushHandoff: a snapshot of each moving volume (a failed snapshot
//     hook: the stopped directory as it is, HookFailed), then one
//     transaction: check-session and check-index (the fencing token) on
//     the slot key, set the handoff, the audit record. Refused: GiveUp
//     (the hold is not this session's). With Ready false (the volumes
//     were never ready here) the handoff it was to restore is passed on
//     (ForwardedBy), if it is the one planned for this term.
//   - PushCopies (the agent's periodic copies, every Unit.CopyEvery while
//     the instance runs): for each moving volume with replicas,
//     cluster.PushCopies: a snapshot file,
//     pushed to that many live fleet nodes' APIs, recorded in
//     volumes/<unit>/<k>/<volume>/copies with a check-session on the
//     slot key (only the holder records copies).
//
// The volumes belong to their unit's user (Volumes.Owner,
// cluster.VolumeOwner: its first service with a user): their directories
// are given to it, and the snapshot and restore hooks run as it.
//
// A stopping executor (Stop) that published handoffs of its own data ends
// only once each has been acknowledged by its next holder (Restored) or
// replaced, no other fleet node is live to take it, or the bounds of
// cluster.HandoffClaimWindow pass: the
// caller's node API must serve the snapshots until Stop returns. A Stop
// whose context ends first ends at once.
//
// Across an upgrade in place the holds are adopted with their volumes
// ready (agent.AdoptSlot.Volumes): the data on the node is the term's, no
// restore; a handoff after it is of the node's own data.

// Volumes is what the executor needs to perform the volumes' actions.
type Volumes struct {
	Store *volume.Store
	// APIURL is this node's API, which serves its snapshots
	// (Store.Handler with cluster.AuthorizeVolume): the handoff's URL.
	APIURL string
	// Specs are a unit's volume blocks (nil: none).
	Specs func(unit string) []*schema.Volume
	// Owner is the user a unit's volumes belong to (cluster.VolumeOwner;
	// nil func or nil answer: mariposa's own).
	Owner func(unit string) (*volume.RunAs, error)
}

// restoreRun is a restore on its way: cancel ends it, done is closed when
// it has.
type restoreRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// actVolumes performs the volumes' actions (from the loop); false: not
// one of them.
func (e *Executor) actVolumes(a any) bool {
	switch a := a.(type) {
	case agent.Restore:
		if e.restores == nil {
			e.restores = map[agent.SlotID]*restoreRun{}
		}
		prev := e.restores[a.Slot]
		ctx, cancel := context.WithCancel(e.ctx)
		run := &restoreRun{cancel: cancel, done: make(chan struct{})}
		e.restores[a.Slot] = run
		if prev != nil {
			prev.cancel()
		}
		go func() {
			defer close(run.done)
			defer cancel()
			if prev != nil {
				<-prev.done
			}
			e.inbox.post(sessionAns{session: a.Session, in: e.restore(ctx, a)})
		}()
	case agent.PushHandoff:
		go func() { e.inbox.post(sessionAns{session: a.Session, in: e.pushHandoff(a)}) }()
	case agent.PushCopies:
		go func() { e.inbox.post(sessionAns{session: a.Session, in: e.pushCopies(a)}) }()
	default:
		return false
	}
	return true
}

// owned is ctx with the user unit's volumes belong to (their hooks run as
// it), and that user (nil: mariposa's own).
func (e *Executor) owned(ctx context.Context, unit string) (context.Context, *volume.RunAs, error) {
	v := e.cfg.Volumes
	if v == nil || v.Owner == nil {
		return ctx, nil, nil
	}
	ra, err := v.Owner(unit)
	if err != nil {
		return ctx, nil, err
	}
	return volume.WithRunAs(ctx, ra), ra, nil
}

func (e *Executor) volumeSpecs(unit string) (vols []*schema.Volume, moving []*schema.Volume) {
	if v := e.cfg.Volumes; v != nil && v.Specs != nil {
		vols = v.Specs(unit)
	}
	for _, v := range vols {
		if v.Handoff == schema.HandoffSnapshot {
			moving = append(moving, v)
		}
	}
	return vols, moving
}

// readHandoff reads the slot's handoff, consistently: nil when there is
// none or it cannot be read (logged, and taken as none).
func (e *Executor) readHandoff(ctx context.Context, id agent.SlotID) (*cluster.Handoff, uint64, error) {
	p, _, err := e.cfg.Client.KV().Get(cluster.HandoffKey(id.Unit, id.K), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || p == nil {
		return nil, 0, err
	}
	ho, err := cluster.DecodeHandoff(p.Value)
	if err != nil {
		e.log.Warn("ignoring a handoff that cannot be read", "slot", id.String(), "error", err)
		return nil, 0, nil
	}
	return &ho, p.ModifyIndex, nil
}

// heldKey reads the slot key, consistently, and checks that session holds
// it.
func (e *Executor) heldKey(ctx context.Context, id agent.SlotID, session string) (*api.KVPair, error) {
	p, _, err := e.cfg.Client.KV().Get(id.Key(), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if p == nil || p.Session != session {
		return nil, errNotHeld
	}
	return p, nil
}

var errNotHeld = errors.New("the slot is not held by this session")

// restore performs agent.Restore.
func (e *Executor) restore(ctx context.Context, a agent.Restore) agent.RestoreDone {
	done := agent.RestoreDone{Slot: a.Slot, Index: a.Index}
	note, from, ack, err := e.readyVolumes(ctx, a)
	if err != nil {
		done.Note = err.Error()
		done.Missing = errors.Is(err, errVolumeMissing)
		e.log.Warn("the slot's volumes could not be prepared", "slot", a.Slot.String(), "error", err)
		return done
	}
	done.OK, done.Note = true, note
	if note == "" {
		return done
	}
	e.log.Info("volumes ready", "slot", a.Slot.String(), "how", note)
	rec := cluster.AuditOp(cluster.AuditEvent{At: time.Now(), Node: e.cfg.Node, Service: a.Slot.Unit, Slot: a.Slot.String(),
		Action: "restore", From: from, To: e.cfg.Node, Reason: note, TermIndex: a.Index})
	rctx, cancel := e.request()
	defer cancel()
	// The record and the acknowledgement the old holder waits for, in one
	// transaction; the record alone when the handoff changed meanwhile.
	ok, _, _, err := e.cfg.Client.Txn().Txn(append(api.TxnOps{rec}, ack...), (&api.QueryOptions{}).WithContext(rctx))
	if err == nil && !ok && len(ack) > 0 {
		_, _, _, err = e.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(rctx))
	}
	if err != nil {
		e.log.Warn("could not record the restore", "slot", a.Slot.String(), "error", err)
	}
	return done
}

var errVolumeMissing = errors.New("volume data missing")

// readyVolumes readies the slot's volumes for the term a.Index (see the
// top of this file); it returns what it did, the previous holder as far
// as it knows (the record's From: a.Prev, or the node of the handoff
// restored) and the acknowledgement of a restored handoff.
func (e *Executor) readyVolumes(ctx context.Context, a agent.Restore) (note, from string, ack api.TxnOps, err error) {
	from = a.Prev
	vc := e.cfg.Volumes
	vols, moving := e.volumeSpecs(a.Slot.Unit)
	if len(vols) > 0 && (vc == nil || vc.Store == nil) {
		return "", "", nil, errors.New("no volume store on this node")
	}
	u, k := a.Slot.Unit, a.Slot.K
	ctx, owner, err := e.owned(ctx, u)
	if err != nil {
		return "", "", nil, err
	}
	for _, v := range vols {
		live, err := vc.Store.Ensure(u, k, v.Path)
		if err == nil {
			err = volume.Own(live, owner)
		}
		if err != nil {
			return "", "", nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	if len(moving) == 0 {
		return "", "", nil, nil
	}
	key, err := e.heldKey(ctx, a.Slot, a.Session)
	if err != nil {
		return "", "", nil, err
	}
	ho, hoIndex, err := e.readHandoff(ctx, a.Slot)
	if err != nil {
		return "", "", nil, fmt.Errorf("read the handoff: %w", err)
	}
	var local uint64
	for i, v := range moving {
		g, err := vc.Store.Generation(u, k, v.Path)
		if err != nil {
			return "", "", nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if i == 0 || g < local {
			local = g
		}
	}
	// Who held the slot before: as the agent saw it in the unit's index
	// (Restore.Prev); when it did not, that someone did is known when
	// there is a handoff, a copy of its data on this node, or its
	// ClaimedKey was created by an earlier claim than this term's.
	prev := a.Prev
	switch {
	case prev != "":
	case ho != nil || local != 0:
		prev = "(an earlier holder)"
	default:
		p, _, err := e.cfg.Client.KV().Get(a.Slot.ClaimedKey(), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return "", "", nil, fmt.Errorf("read whether the slot was held before: %w", err)
		}
		if p != nil && p.CreateIndex < a.Index {
			prev = "(an earlier holder)"
		}
	}
	choice, why := cluster.ChooseData(cluster.DataCandidates{Self: e.cfg.Node, LockIndex: key.LockIndex, Term: a.Index, PrevNode: prev, Handoff: ho, Local: local})
	switch choice {
	case cluster.DataEmpty:
	case cluster.DataKeep:
		note = why
	case cluster.DataRestore:
		var done []string
		for _, v := range moving {
			d, err := e.fetch(ctx, a, v, ho)
			if err != nil {
				return "", "", nil, err
			}
			done = append(done, d)
		}
		acked := *ho
		acked.Restored = &cluster.HandoffAck{Node: e.cfg.Node, TermIndex: a.Index, At: time.Now()}
		b, err := json.Marshal(acked)
		if err != nil {
			return "", "", nil, err
		}
		ack = api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: cluster.HandoffKey(u, k), Value: b, Index: hoIndex}}}
		if from == "" {
			from = ho.Node
		}
		note = fmt.Sprintf("restored the handoff of %s (generation %d): %v", ho.At.Format(time.RFC3339), ho.TermIndex, done)
	default:
		var notes []string
		for _, v := range moving {
			n, err := e.onMissing(ctx, a, v, ho)
			if err != nil {
				return "", "", nil, err
			}
			notes = append(notes, n)
		}
		note = fmt.Sprintf("the last holder was lost without a handoff: %v", notes)
		if a.Prev != "" {
			note = fmt.Sprintf("the last holder (%s) was lost without a handoff: %v", a.Prev, notes)
		}
	}
	// The volumes hold this term's data from now on.
	for _, v := range moving {
		if err := vc.Store.SetGeneration(u, k, v.Path, a.Index); err != nil {
			return "", "", nil, fmt.Errorf("volume %s: recording its generation: %w", v.Name, err)
		}
	}
	return note, from, ack, nil
}

// fetch restores v from the handoff ho's snapshot.
func (e *Executor) fetch(ctx context.Context, a agent.Restore, v *schema.Volume, ho *cluster.Handoff) (string, error) {
	m, ok := ho.Volumes[v.Name]
	if !ok {
		return "", fmt.Errorf("volume %s: the handoff from %s has no snapshot of it", v.Name, ho.Node)
	}
	src := volume.Source{URL: volume.SnapshotURL(ho.URL, a.Slot.Unit, a.Slot.K, v.Path, m.SHA256), SHA256: m.SHA256, Size: m.Size,
		Header: http.Header{cluster.SessionHeader: {a.Session}}}
	hook := v.Restore
	if ho.HookFailed[v.Name] != "" {
		hook = nil // the stopped directory as it is
	}
	t0 := time.Now()
	got, err := e.cfg.Volumes.Store.Restore(ctx, a.Slot.Unit, a.Slot.K, v.Path, src, hook, os.Environ(), v.RestoreTimeout)
	if err != nil {
		return "", fmt.Errorf("volume %s: restore from %s: %w", v.Name, ho.Node, err)
	}
	return fmt.Sprintf("%s (%d bytes from %s in %s)", v.Name, got.Size, ho.Node, time.Since(t0).Round(time.Millisecond)), nil
}

// onMissing readies v when the newest data was lost with a node.
func (e *Executor) onMissing(ctx context.Context, a agent.Restore, v *schema.Volume, ho *cluster.Handoff) (string, error) {
	store := e.cfg.Volumes.Store
	switch v.OnMissing {
	case schema.OnMissingFail:
		return "", fmt.Errorf("%w: volume %s: the last holder%s gave no handoff, and on_missing is \"fail\"", errVolumeMissing, v.Name, prevName(a.Prev))
	case schema.OnMissingEmpty:
		return v.Name + " started empty (on_missing = \"empty\")", store.Empty(a.Slot.Unit, a.Slot.K, v.Path)
	}
	return cluster.RestoreLatest(ctx, cluster.LatestRestore{Client: e.cfg.Client, Store: store, Self: e.cfg.Node, Session: a.Session,
		Unit: a.Slot.Unit, K: a.Slot.K, Volume: v, Handoff: ho, Log: e.log})
}

// pushHandoff performs agent.PushHandoff.
func (e *Executor) pushHandoff(a agent.PushHandoff) (done agent.HandoffDone) {
	done = agent.HandoffDone{Slot: a.Slot}
	ctx, cancel := context.WithTimeout(e.ctx, 10*e.cfg.Request)
	defer cancel()
	key, err := e.heldKey(ctx, a.Slot, a.Session)
	if err != nil {
		done.Note, done.GiveUp = err.Error(), errors.Is(err, errNotHeld)
		return done
	}
	ho, note, err := e.handoffValue(ctx, a, key.LockIndex)
	switch {
	case err != nil:
		e.log.Warn("no handoff of the slot's data: the next holder applies on_missing", "slot", a.Slot.String(), "error", err)
		done.Note, done.GiveUp = err.Error(), true
		return done
	case ho == nil:
		done.OK, done.Note = true, note
		return done
	}
	b, err := json.Marshal(ho)
	if err != nil {
		done.Note, done.GiveUp = err.Error(), true
		return done
	}
	// Its record is the release's that follows (agent.HandoffDone's Note
	// goes in its reason: website/operations.md's release row).
	ok, r, _, err := e.cfg.Client.Txn().Txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session}),
		kv(&api.KVTxnOp{Verb: api.KVCheckIndex, Key: a.Slot.Key(), Index: a.Index}),
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: cluster.HandoffKey(a.Slot.Unit, a.Slot.K), Value: b}),
	}, (&api.QueryOptions{}).WithContext(ctx))
	switch {
	case err != nil:
		done.Note = err.Error() // no answer: the agent sends it again
	case !ok:
		done.Note, done.GiveUp = fmt.Sprint("refused: ", r.Errors), true
	default:
		done.OK, done.Note = true, note
		e.log.Info("handed the slot's data off", "slot", a.Slot.String(), "how", note)
		if a.Ready {
			e.inbox.post(handedOff{slot: a.Slot, gen: a.Index})
		}
	}
	return done
}

// handoffValue is the handoff to publish (nil: none, with why).
func (e *Executor) handoffValue(ctx context.Context, a agent.PushHandoff, lockIndex uint64) (*cluster.Handoff, string, error) {
	_, moving := e.volumeSpecs(a.Slot.Unit)
	vc := e.cfg.Volumes
	if len(moving) == 0 {
		return nil, "no volume moves with the slot", nil
	}
	if vc == nil || vc.Store == nil {
		return nil, "", errors.New("no volume store on this node")
	}
	if !a.Ready {
		ho, _, err := e.readHandoff(ctx, a.Slot)
		if err != nil {
			return nil, "", err
		}
		if ho == nil || !ho.PlannedFor(lockIndex, a.Index) {
			return nil, "its volumes were never ready here, and there is no handoff of its data to pass on", nil
		}
		fw := *ho
		fw.LockIndex, fw.ForwardedBy, fw.Restored = lockIndex, e.cfg.Node, nil
		return &fw, fmt.Sprintf("its volumes were never ready here: passed on the handoff of generation %d from %s", ho.TermIndex, ho.Node), nil
	}
	if vc.APIURL == "" {
		return nil, "", errors.New("this node's HTTP API is off: nothing could serve the snapshot")
	}
	ctx, _, err := e.owned(ctx, a.Slot.Unit)
	if err != nil {
		return nil, "", err
	}
	ho := &cluster.Handoff{Node: e.cfg.Node, URL: vc.APIURL, LockIndex: lockIndex, TermIndex: a.Index, Volumes: map[string]volume.Meta{}}
	note := "data handed off"
	for _, v := range moving {
		m, err := vc.Store.Snapshot(ctx, a.Slot.Unit, a.Slot.K, v.Path, v.Snapshot, os.Environ())
		if err != nil && len(v.Snapshot) > 0 {
			// The instance has stopped: its directory is consistent as
			// it is.
			if ho.HookFailed == nil {
				ho.HookFailed = map[string]string{}
			}
			ho.HookFailed[v.Name] = err.Error()
			note += fmt.Sprintf("; the snapshot hook of %s failed (%v): its stopped directory was handed off as it is", v.Name, err)
			m, err = vc.Store.Snapshot(ctx, a.Slot.Unit, a.Slot.K, v.Path, nil, os.Environ())
		}
		if err != nil {
			return nil, "", fmt.Errorf("volume %s: snapshot: %w", v.Name, err)
		}
		ho.Volumes[v.Name] = m
	}
	ho.At = time.Now()
	return ho, note, nil
}

// pushCopies performs agent.PushCopies: one copy of each moving volume
// with replicas (cluster.PushCopies); OK when every one was recorded.
func (e *Executor) pushCopies(a agent.PushCopies) agent.CopiesDone {
	done := agent.CopiesDone{Slot: a.Slot, Index: a.Index}
	_, moving := e.volumeSpecs(a.Slot.Unit)
	vc := e.cfg.Volumes
	if vc == nil || vc.Store == nil {
		done.Note = "no volume store on this node"
		return done
	}
	ctx, owner, err := e.owned(e.ctx, a.Slot.Unit)
	if err != nil {
		done.Note = err.Error()
		return done
	}
	var failed []string
	for _, v := range moving {
		if v.Replicas <= 0 {
			continue
		}
		// A copy is bounded as a restore of it would be.
		vctx, cancel := context.WithTimeout(ctx, max(v.RestoreTimeout, 10*e.cfg.Request))
		err := cluster.PushCopies(vctx, cluster.CopyPush{Client: e.cfg.Client, Store: vc.Store, Self: e.cfg.Node, Unit: a.Slot.Unit, K: a.Slot.K,
			Volume: v, Key: a.Slot.Key(), Session: a.Session, TermIndex: a.Index, Owner: owner, Log: e.log})
		cancel()
		if err != nil {
			if e.ctx.Err() == nil {
				e.log.Warn("a periodic copy failed; trying again at the next interval", "slot", a.Slot.String(), "volume", v.Name, "error", err)
			}
			failed = append(failed, fmt.Sprintf("%s: %v", v.Name, err))
		}
	}
	done.OK = len(failed) == 0
	if !done.OK {
		done.Note = fmt.Sprint(failed)
	}
	return done
}

// Inputs of the loop about handoffs.
type (
	// handedOff: this node published a handoff of its own data (kept
	// only while stopping: a stop awaits only its own handoffs).
	handedOff struct {
		slot agent.SlotID
		gen  uint64
	}
	// handoffsServed: the wait for the acknowledgements has ended.
	handoffsServed struct{}
)

func (e *Executor) handleVolumes(in any) {
	switch in := in.(type) {
	case handedOff:
		if !e.stopping {
			return // (a scale-down's: its next holder may never come)
		}
		if e.handed == nil {
			e.handed = map[agent.SlotID]uint64{}
		}
		e.handed[in.slot] = in.gen
	case handoffsServed:
		e.serving = 2
	}
}

// servedHandoffs says whether a stopping executor may end: the handoffs
// it published have been taken (or the wait for them ended). The first
// call starts the wait.
func (e *Executor) servedHandoffs() bool {
	switch {
	case e.serving == 2:
		return true
	case e.serving == 1:
		return false
	}
	others := 0
	failing := map[string]bool{}
	for _, n := range e.failing {
		failing[n] = true
	}
	for _, n := range e.members {
		if n != e.cfg.Node && !failing[n] {
			others++
		}
	}
	if len(e.handed) == 0 {
		e.serving = 2
		return true
	}
	e.serving = 1
	handed := e.handed
	if others == 0 {
		// Nobody to take the data: it stays here, and says so
		// (handoff-unserved).
		go func() {
			defer e.inbox.post(handoffsServed{})
			for id, gen := range handed {
				e.recordUnserved(id, gen, "no other supervisor is live to take the slot")
			}
		}()
		return false
	}
	limit := cluster.HandoffClaimWindow
	for id := range handed {
		_, moving := e.volumeSpecs(id.Unit)
		for _, v := range moving {
			limit = max(limit, cluster.HandoffClaimWindow+v.RestoreTimeout)
		}
	}
	go func() {
		defer e.inbox.post(handoffsServed{})
		ctx, cancel := context.WithTimeout(e.ctx, limit)
		defer cancel()
		var wg sync.WaitGroup
		for id, gen := range handed {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if why := e.awaitRestore(ctx, id, gen); why != "" {
					e.recordUnserved(id, gen, why)
				}
			}()
		}
		wg.Wait()
	}()
	return false
}

// awaitRestore waits until the handoff of id at generation gen is
// acknowledged or replaced; it returns why it stopped waiting without
// ("" when it was).
func (e *Executor) awaitRestore(ctx context.Context, id agent.SlotID, gen uint64) string {
	start := time.Now()
	var index uint64
	for {
		p, meta, err := e.cfg.Client.KV().Get(cluster.HandoffKey(id.Unit, id.K), (&api.QueryOptions{WaitIndex: index, WaitTime: time.Second}).WithContext(ctx))
		switch {
		case ctx.Err() != nil:
			return fmt.Sprintf("no holder said it has the data within %s", time.Since(start).Round(time.Second))
		case err != nil:
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		index = advance(index, meta.LastIndex)
		if p == nil {
			return ""
		}
		ho, err := cluster.DecodeHandoff(p.Value)
		if err != nil || ho.Node != e.cfg.Node || ho.TermIndex != gen || ho.Restored != nil {
			return "" // acknowledged, or another generation's
		}
		if time.Since(start) > cluster.HandoffClaimWindow {
			s, _, err := e.cfg.Client.KV().Get(id.Key(), (&api.QueryOptions{}).WithContext(ctx))
			if err == nil && (s == nil || s.Session == "") {
				return fmt.Sprintf("no node claimed the slot within %s", cluster.HandoffClaimWindow)
			}
		}
	}
}

// prevName is " (<node>)" for a known previous holder, "" otherwise.
func prevName(node string) string {
	if node == "" {
		return ""
	}
	return " (" + node + ")"
}

// recordUnserved records that this node stopped serving the handoff of
// slot id's data (generation gen) before a next holder had it (its
// handoff-unserved record, website/operations.md): the data stays on this
// node, and the next holders' restores fail (and pass the handoff on)
// until it serves it again.
func (e *Executor) recordUnserved(id agent.SlotID, gen uint64, why string) {
	reason := why + "; the slot's data stays on this node, which serves it again once its mariposa runs"
	e.log.Warn("no longer serving the slot's handoff", "slot", id.String(), "reason", reason)
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Request)
	defer cancel()
	rec := cluster.AuditOp(cluster.AuditEvent{At: time.Now(), Node: e.cfg.Node, Service: id.Unit, Slot: id.String(), Action: "handoff-unserved",
		From: e.cfg.Node, Reason: reason, TermIndex: gen})
	if _, _, _, err := e.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		e.log.Warn("could not record that the handoff is no longer served", "slot", id.String(), "error", err)
	}
}
