package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/users"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Volumes: data that belongs to a slot (website/stateful.md, CLUSTER.md
// section 8). The fleet prepares a claimed slot's volumes before it hands
// the slot to the supervisor, and publishes a handoff when it gives a slot
// up after its instance stopped:
//
//	old holder                                   new holder
//	instance stopped (slot still held)
//	Snapshot: hook, hash the directory
//	txn [unlock slots/u/k (fails unless
//	     this session holds it),
//	     set handoffs/u/k {node, url, lock_index, volumes},
//	     audit]                            ───>  claim slots/u/k (LockIndex n+1)
//	                                             read handoffs/u/k: lock_index n?
//	serve GET /v1/volumes/u/k/<path>      <───     Restore (session in the request)
//	                                             verified, renamed into place
//	                                             generation := its term's index
//	                                             txn [audit restore,
//	   (a stopping mariposa waits      <───           CAS handoffs/u/k restored]
//	    for this, bounded)                       hand the slot to the supervisor
//
// The unlock is the fence: Consul refuses it unless the session holds the
// lock, and with it the whole transaction, so a holder that lost its slot
// (frozen, cut off) cannot publish a handoff, and the lock_index says whether a
// handoff was written by the holder just before this one: if not, the
// last holder was lost without one, and on_missing decides. Which copy
// of the data wins is chooseData's: by generation (the fencing index of
// the term that wrote it), never by who handed off last.

// HandoffsPrefix holds the last planned handoff of each slot with volumes.
const HandoffsPrefix = Prefix + "handoffs/"

// HandoffKey is handoffs/<unit>/<k>.
func HandoffKey(unit string, k int) string { return HandoffsPrefix + unit + "/" + strconv.Itoa(k) }

// SessionHeader carries the caller's session in a volume request: the
// serving node checks that it holds the slot now.
const SessionHeader = "X-Mariposa-Session"

// Handoff is the value of handoffs/<unit>/<k>: what a holder that gave the
// slot up left for the next one.
type Handoff struct {
	Node string `json:"node"`
	// URL is the old holder's node API, which serves the snapshots.
	URL string `json:"url"`
	// LockIndex is the slot key's LockIndex during the releasing term: the
	// next holder's is one more when nobody held the slot in between.
	LockIndex uint64    `json:"lock_index"`
	TermIndex uint64    `json:"term_index"`
	At        time.Time `json:"at"`
	// Volumes are the snapshots by volume name.
	Volumes map[string]volume.Meta `json:"volumes"`
	// HookFailed: the volumes whose snapshot hook failed once the
	// instance had stopped, with the error: their stopped directory is
	// handed off as it is, and the next holder does not run restore.
	HookFailed map[string]string `json:"hook_failed,omitempty"`
	// ForwardedBy: a holder that could not restore this handoff (its
	// volumes were never ready, so its instance never wrote) passed it
	// on unchanged but for LockIndex, instead of handing off its own
	// volumes: the data is still the one Node serves.
	ForwardedBy string `json:"forwarded_by,omitempty"`
	// Restored is the next holder's acknowledgement that it has the data
	// (written with its restore record): the old holder serves the
	// snapshots until it is there.
	Restored *HandoffAck `json:"restored,omitempty"`
}

// HandoffAck says which holder restored a handoff.
type HandoffAck struct {
	Node      string    `json:"node"`
	TermIndex uint64    `json:"term_index"`
	At        time.Time `json:"at"`
}

// DecodeHandoff reads a handoff written by any version; an error for a
// value that is not one (reported, and treated as no handoff).
func DecodeHandoff(b []byte) (Handoff, error) {
	var h Handoff
	if err := json.Unmarshal(b, &h); err != nil {
		return Handoff{}, fmt.Errorf("handoff: %w", err)
	}
	if h.Node == "" || h.LockIndex == 0 {
		return Handoff{}, errors.New("handoff: no node or lock index")
	}
	for name, m := range h.Volumes {
		if len(m.SHA256) != 64 || m.Size < 0 {
			return Handoff{}, fmt.Errorf("handoff: volume %q: no valid checksum or size", name)
		}
	}
	return h, nil
}

// volumesOf is a unit's volume blocks; snapshotted says whether any moves
// with its slot.
func volumesOf(u UnitSpec) (vols []*schema.Volume, snapshotted bool) {
	if u.Unit.Placement == nil {
		return nil, false
	}
	for _, v := range u.Unit.Placement.Volumes {
		if v.Handoff == schema.HandoffSnapshot {
			snapshotted = true
		}
	}
	return u.Unit.Placement.Volumes, snapshotted
}

// errVolumeMissing: on_missing = "fail" and the data could not be handed
// off: the slot fails until an operator resets it.
var errVolumeMissing = errors.New("volume data missing")

// dataChoice is where a new holder's data comes from (chooseData).
type dataChoice int

const (
	dataEmpty     dataChoice = iota // the slot's first holder: empty volumes
	dataKeep                        // this node's copy is the newest
	dataRestore                     // fetch the planned handoff
	dataUnplanned                   // the newest data was lost with a node: on_missing
)

// dataCandidates is what a new holder knows when it decides where its data
// comes from: its own term, the slot's previous holder, the last handoff
// and the generation of its own copy of the volumes.
type dataCandidates struct {
	Self string
	// LockIndex is this node's term's (the slot key's LockIndex).
	LockIndex uint64
	// PrevNode held the slot before this node claimed it ("" for none).
	PrevNode string
	Handoff  *Handoff // nil: none, or one that cannot be read
	// Local is the generation of this node's copy (the fencing index of
	// the term whose writes it holds); 0 when it has none recorded.
	Local uint64
}

// chooseData decides where a new holder's data comes from, and says why.
// Data is compared by generation (the fencing index of the term that wrote
// it, which only grows), never by who handed what off: a planned handoff
// (written by the holder just before this one, whose lock_index is one
// less than this term's) is the newest data there is, and this node keeps
// its own copy only when that copy is of the handoff's generation.
func chooseData(c dataCandidates) (dataChoice, string) {
	ho := c.Handoff
	switch {
	case ho != nil && ho.LockIndex+1 == c.LockIndex:
		switch {
		case c.Local != 0 && c.Local == ho.TermIndex:
			return dataKeep, fmt.Sprintf("kept this node's data: it is the handoff's generation (%d)", c.Local)
		case c.Local == 0 && ho.Node == c.Self && ho.ForwardedBy == "":
			// A copy from a mariposa that recorded no generations, whose
			// own handoff this is: the newest data (as before).
			return dataKeep, "kept this node's data: it handed the slot off itself"
		}
		return dataRestore, fmt.Sprintf("the handoff of generation %d from %s is newer than this node's copy (%d)", ho.TermIndex, ho.Node, c.Local)
	case ho == nil && c.PrevNode == "":
		return dataEmpty, ""
	case c.PrevNode == c.Self && (ho == nil || c.Local == 0 || c.Local >= ho.TermIndex):
		// This node held the slot last and lost it without a handoff (its
		// mariposa restarted, its session expired): its data is the
		// newest, unless a handoff of a later generation says otherwise.
		return dataKeep, "kept this node's data: it held the slot last"
	}
	return dataUnplanned, ""
}

// prepareVolumes readies slot h's volumes on this node before its
// instance starts: a planned handoff is restored from the old holder, the
// data of a slot this node held last is kept, and otherwise on_missing
// decides (chooseData). It returns what it did, for the record, and the
// acknowledgement of a restored handoff, to write with that record.
func (f *Fleet) prepareVolumes(ctx context.Context, h *heldSlot) (string, api.TxnOps, error) {
	note, ack, err := f.readyVolumes(ctx, h)
	if err != nil {
		return "", nil, err
	}
	// The volumes hold this term's data from now on: their generation is
	// this term's fencing index, recorded before the instance writes.
	vols, _ := volumesOf(h.unit)
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		if err := f.cfg.Volumes.SetGeneration(h.unit.Unit.Name, h.k, v.Path, h.term.Index); err != nil {
			return "", nil, fmt.Errorf("volume %s: recording its generation: %w", v.Name, err)
		}
	}
	return note, ack, nil
}

// localGeneration is the oldest generation of this node's copies of the
// snapshot volumes (0 when one has none).
func (f *Fleet) localGeneration(unit string, k int, vols []*schema.Volume) (uint64, error) {
	var gen uint64
	first := true
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		g, err := f.cfg.Volumes.Generation(unit, k, v.Path)
		if err != nil {
			return 0, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if first || g < gen {
			gen, first = g, false
		}
	}
	return gen, nil
}

// readHandoff reads slot k's last handoff, consistently; nil when there is
// none or it cannot be read (reported).
func (f *Fleet) readHandoff(ctx context.Context, unit string, k int) (*Handoff, uint64, error) {
	kv, _, err := f.cfg.Client.KV().Get(HandoffKey(unit, k), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("read the handoff: %w", err)
	}
	if kv == nil {
		return nil, 0, nil
	}
	d, err := DecodeHandoff(kv.Value)
	if err != nil {
		f.log.Warn("ignoring a handoff that cannot be read", "slot", slotName(unit, k), "error", err)
		return nil, 0, nil
	}
	return &d, kv.ModifyIndex, nil
}

func (f *Fleet) readyVolumes(ctx context.Context, h *heldSlot) (string, api.TxnOps, error) {
	store := f.cfg.Volumes
	u, k := h.unit.Unit.Name, h.k
	vols, snapshotted := volumesOf(h.unit)
	owner, err := volumeOwner(h.unit)
	if err != nil {
		return "", nil, err
	}
	ctx = volume.WithRunAs(ctx, owner)
	for _, v := range vols {
		live, err := store.Ensure(u, k, v.Path)
		if err == nil {
			err = volume.Own(live, owner)
		}
		if err != nil {
			return "", nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	if !snapshotted {
		return "", nil, nil
	}
	ho, hoIndex, err := f.readHandoff(ctx, u, k)
	if err != nil {
		return "", nil, err
	}
	local, err := f.localGeneration(u, k, vols)
	if err != nil {
		return "", nil, err
	}
	choice, why := chooseData(dataCandidates{Self: f.cfg.Node, LockIndex: h.term.LockIndex, PrevNode: h.prevNode, Handoff: ho, Local: local})
	switch choice {
	case dataEmpty:
		return "", nil, nil // the slot's first holder: its volumes start empty
	case dataKeep:
		return why, nil, nil
	case dataRestore:
		env := os.Environ()
		var done []string
		for _, v := range vols {
			if v.Handoff != schema.HandoffSnapshot {
				continue
			}
			m, ok := ho.Volumes[v.Name]
			if !ok {
				return "", nil, fmt.Errorf("volume %s: the handoff from %s has no snapshot of it", v.Name, ho.Node)
			}
			src := volume.Source{URL: volume.SnapshotURL(ho.URL, u, k, v.Path, m.SHA256), SHA256: m.SHA256, Size: m.Size,
				Header: http.Header{SessionHeader: {h.term.Session}}}
			hook := v.Restore
			if ho.HookFailed[v.Name] != "" {
				// The stopped directory as it is: nothing of the
				// snapshot hook's to load.
				hook = nil
			}
			t0 := f.cfg.Now()
			got, err := store.Restore(ctx, u, k, v.Path, src, hook, env, v.RestoreTimeout)
			if err != nil {
				return "", nil, fmt.Errorf("volume %s: restore from %s: %w", v.Name, ho.Node, err)
			}
			d := fmt.Sprintf("%s (%d bytes from %s in %s)", v.Name, got.Size, ho.Node, f.cfg.Now().Sub(t0).Round(time.Millisecond))
			if hook == nil && len(v.Restore) > 0 {
				d += " without its restore hook: its snapshot hook had failed"
			}
			done = append(done, d)
		}
		// The acknowledgement the old holder waits for, in the record's
		// transaction: set only if the handoff is still the one restored.
		acked := *ho
		acked.Restored = &HandoffAck{Node: f.cfg.Node, TermIndex: h.term.Index, At: f.cfg.Now()}
		b, err := json.Marshal(acked)
		if err != nil {
			return "", nil, err
		}
		ack := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: HandoffKey(u, k), Value: b, Index: hoIndex}}}
		return fmt.Sprintf("restored the handoff of %s (generation %d): %v", ho.At.Format(time.RFC3339), ho.TermIndex, done), ack, nil
	}
	// Unplanned: the last holder was lost with the data.
	var notes []string
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		switch v.OnMissing {
		case schema.OnMissingFail:
			return "", nil, fmt.Errorf("%w: volume %s: the last holder (%s) gave no handoff, and on_missing is \"fail\"", errVolumeMissing, v.Name, h.prevNode)
		case schema.OnMissingEmpty:
			if err := store.Empty(u, k, v.Path); err != nil {
				return "", nil, err
			}
			notes = append(notes, v.Name+" started empty (on_missing = \"empty\")")
		default:
			// latest: the newest copy there is (RestoreLatest).
			n, err := RestoreLatest(ctx, LatestRestore{Client: f.cfg.Client, Store: store, Self: f.cfg.Node, Session: h.term.Session,
				Unit: u, K: k, Volume: v, Handoff: ho, Now: f.cfg.Now, Log: f.log})
			if err != nil {
				return "", nil, err
			}
			notes = append(notes, n)
		}
	}
	return fmt.Sprintf("the last holder (%s) was lost without a handoff: %v", h.prevNode, notes), nil, nil
}

// copyKind is what a copy of a volume's data is, in the order a new
// holder prefers them at the same generation.
type copyKind int

const (
	copyPeriodic copyKind = iota // pushed while the holder ran: part of its term's writes
	copyHandoff                  // a handoff's snapshot: the data as its term ended
	copyLocal                    // this node's own: as good as a handoff, without a transfer
)

// dataCopy is one copy of a volume's data a new holder could start from
// after an unplanned loss.
type dataCopy struct {
	Kind copyKind
	From string
	// Gen is the generation of the data: the fencing index of the term
	// that wrote it (0: unknown, a copy recorded by an older mariposa).
	Gen uint64
	At  time.Time // when it was taken (zero: unknown)

	url, sha string
	size     int64
	raw      bool // a stopped directory whose snapshot hook failed: no restore hook
}

// newestFirst orders the copies newest first: by generation (an unknown
// one last), then a copy of the whole term (this node's own, a handoff)
// before a periodic copy taken during it, this node's own before a
// handoff of the same generation, then by when it was taken.
func newestFirst(cs []dataCopy) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Gen != b.Gen {
			return a.Gen > b.Gen
		}
		if a.Kind != b.Kind {
			return a.Kind > b.Kind
		}
		return a.At.After(b.At)
	})
}

// handoffOps snapshots the stopped volumes of slot h and returns the
// transaction operation that publishes them with the release, fenced by
// its unlock, and what it did, for the record. Nil when the unit has no
// volume that moves. A holder whose volumes were never ready (a restore
// that failed: its instance never ran) forwards the handoff it was to
// restore instead of publishing its own, older or empty, volumes; with
// none to forward it publishes nothing. A snapshot hook that fails once
// the instance has stopped does not hold the data back: the stopped
// directory is handed off as it is, with the hook's error in the handoff.
//
// serves says that the handoff names this node's own snapshots.
func (f *Fleet) handoffOps(ctx context.Context, h *heldSlot) (ops api.TxnOps, note string, serves bool, err error) {
	vols, snapshotted := volumesOf(h.unit)
	if !snapshotted || f.cfg.Volumes == nil {
		return nil, "", false, nil
	}
	u, k := h.unit.Unit.Name, h.k
	f.mu.Lock()
	ready := h.volumesReady
	f.mu.Unlock()
	if !ready {
		ho, _, err := f.readHandoff(ctx, u, k)
		if err != nil {
			return nil, "", false, err
		}
		if ho == nil || ho.LockIndex+1 != h.term.LockIndex {
			return nil, "its volumes were never ready here, and there is no handoff of its data to pass on", false, nil
		}
		fw := *ho
		fw.LockIndex, fw.ForwardedBy, fw.Restored = h.term.LockIndex, f.cfg.Node, nil
		b, err := json.Marshal(fw)
		if err != nil {
			return nil, "", false, err
		}
		return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: HandoffKey(u, k), Value: b}}},
			fmt.Sprintf("its volumes were never ready here: passed on the handoff of generation %d from %s", ho.TermIndex, ho.Node), false, nil
	}
	if f.cfg.APIURL == "" {
		return nil, "", false, errors.New("this node's HTTP API is off: nothing could serve the snapshot")
	}
	owner, err := volumeOwner(h.unit)
	if err != nil {
		return nil, "", false, err
	}
	ctx = volume.WithRunAs(ctx, owner)
	ho := Handoff{Node: f.cfg.Node, URL: f.cfg.APIURL, LockIndex: h.term.LockIndex, TermIndex: h.term.Index,
		Volumes: map[string]volume.Meta{}}
	note = "data handed off"
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		m, err := f.cfg.Volumes.Snapshot(ctx, u, k, v.Path, v.Snapshot, os.Environ())
		if err != nil && len(v.Snapshot) > 0 {
			// The instance has stopped: its directory is consistent as it
			// is. Hand it off without the hook's work, and say so.
			f.log.Warn("the snapshot hook failed; handing off the stopped directory as it is", "slot", slotName(u, k), "volume", v.Name, "error", err)
			if ho.HookFailed == nil {
				ho.HookFailed = map[string]string{}
			}
			ho.HookFailed[v.Name] = err.Error()
			note += fmt.Sprintf("; the snapshot hook of %s failed (%v): its stopped directory was handed off as it is", v.Name, err)
			m, err = f.cfg.Volumes.Snapshot(ctx, u, k, v.Path, nil, os.Environ())
		}
		if err != nil {
			return nil, "", false, fmt.Errorf("volume %s: snapshot: %w", v.Name, err)
		}
		ho.Volumes[v.Name] = m
	}
	ho.At = f.cfg.Now()
	b, err := json.Marshal(ho)
	if err != nil {
		return nil, "", false, err
	}
	// The fence is the unlock that comes first in the same transaction
	// (lease.Term.ReleaseWith): Consul refuses it, and so the whole
	// transaction, unless this session holds the slot's lock, as a
	// check-session would (TestHandoffFenced).
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: HandoffKey(u, k), Value: b}}}, note, true, nil
}

// HandoffClaimWindow is how long a stopping holder that handed its data
// off waits for another node to claim the slot before it stops serving
// the snapshot; once one has, it waits up to the volumes' longest
// restore_timeout more for that node to say it has the data.
const HandoffClaimWindow = 30 * time.Second

// awaitRestores keeps this node serving the snapshots it handed off with
// the slots of hs until each next holder has acknowledged its restore
// (HandoffAck), another generation replaced the handoff, no other
// supervisor is live to take it, or the bounds of HandoffClaimWindow pass:
// mariposa stopping is a planned move, and its node API stays up while it
// waits.
func (f *Fleet) awaitRestores(ctx context.Context, hs []*heldSlot) {
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if why := f.awaitRestore(ctx, h); why != "" {
				f.recordUnserved(h, why)
			}
		}()
	}
	wg.Wait()
}

// awaitRestore waits for the acknowledgement of h's handoff; it returns
// why it stopped waiting without one ("" once acknowledged or replaced).
func (f *Fleet) awaitRestore(parent context.Context, h *heldSlot) string {
	u, k := h.unit.Unit.Name, h.k
	id := slotName(u, k)
	limit := HandoffClaimWindow
	vols, _ := volumesOf(h.unit)
	for _, v := range vols {
		if v.Handoff == schema.HandoffSnapshot && HandoffClaimWindow+v.RestoreTimeout > limit {
			limit = HandoffClaimWindow + v.RestoreTimeout
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	if es, _, err := f.cfg.Client.Health().Service("mariposa", "", true, (&api.QueryOptions{}).WithContext(ctx)); err == nil {
		others := 0
		for _, e := range es {
			if e.Node.Node != f.cfg.Node {
				others++
			}
		}
		if others == 0 {
			return "no other supervisor is live to take the slot"
		}
	}
	f.log.Info("serving the slot's handoff until the next holder has it", "slot", id, "at_most", limit)
	var index uint64
	for {
		kv, meta, err := f.cfg.Client.KV().Get(HandoffKey(u, k), (&api.QueryOptions{WaitIndex: index, WaitTime: time.Second}).WithContext(ctx))
		switch {
		case parent.Err() != nil:
			return fmt.Sprintf("a second signal cut the wait short after %s", time.Since(start).Round(time.Millisecond))
		case ctx.Err() != nil:
			return fmt.Sprintf("no holder said it has the data within %s", limit)
		case err != nil:
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		index = meta.LastIndex
		if kv == nil {
			return ""
		}
		ho, err := DecodeHandoff(kv.Value)
		if err != nil || ho.Node != f.cfg.Node || ho.TermIndex != h.term.Index {
			return "" // another generation's handoff: ours is served no more
		}
		if ho.Restored != nil {
			f.log.Info("the next holder has the slot's data", "slot", id, "holder", ho.Restored.Node, "waited", time.Since(start).Round(time.Millisecond))
			return ""
		}
		if time.Since(start) > HandoffClaimWindow {
			s, _, err := f.cfg.Client.KV().Get(SlotKey(u, k), (&api.QueryOptions{}).WithContext(ctx))
			if err == nil && (s == nil || s.Session == "") {
				return fmt.Sprintf("no node claimed the slot within %s", HandoffClaimWindow)
			}
		}
	}
}

// recordUnserved records that this node stopped serving the handoff of
// h's data before a next holder had it: the data stays on this node, and
// the next holders' restores fail (and pass the handoff on) until it
// serves it again.
func (f *Fleet) recordUnserved(h *heldSlot, why string) {
	id := slotName(h.unit.Unit.Name, h.k)
	reason := why + "; the slot's data stays on this node, which serves it again once its mariposa runs"
	f.log.Warn("no longer serving the slot's handoff", "slot", id, "reason", reason)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := AuditOp(AuditEvent{At: f.cfg.Now(), Node: f.cfg.Node, Service: h.unit.Unit.Name, Slot: id, Action: "handoff-unserved",
		From: f.cfg.Node, Reason: reason, TermIndex: h.term.Index})
	if _, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		f.log.Warn("could not record that the handoff is no longer served", "slot", id, "error", err)
	}
}

// AuthorizeVolume is the node API's check of a volume request: the
// caller's session (SessionHeader) must hold the slot now, as a
// consistent read of its key says.
func AuthorizeVolume(c *api.Client) func(r *http.Request, unit string, k int) error {
	return func(r *http.Request, unit string, k int) error {
		session := r.Header.Get(SessionHeader)
		if session == "" {
			return errors.New("no session: only the slot's holder may fetch its data")
		}
		kv, _, err := c.KV().Get(SlotKey(unit, k), (&api.QueryOptions{RequireConsistent: true}).WithContext(r.Context()))
		if err != nil {
			return fmt.Errorf("cannot read the slot: %w", err)
		}
		if kv == nil || kv.Session != session {
			return fmt.Errorf("session %s does not hold slot %s/%d", session, unit, k)
		}
		return nil
	}
}

// prepare readies the volumes of slot id (held as h) off the reconcile
// loop; the slot is handed to the supervisor once they are ready. A failed
// restore is a start failure: the slot is rescheduled (or fails, with
// on_missing = "fail"), with its record.
func (f *Fleet) prepare(ctx context.Context, id string, h *heldSlot) {
	note, ack, err := f.prepareVolumes(ctx, h)
	if ctx.Err() != nil {
		return
	}
	now := f.cfg.Now()
	f.mu.Lock()
	mine := f.held[id] == h
	if mine {
		h.preparing = false
		switch {
		case err == nil:
			h.volumesReady, h.volumeNote = true, note
		case errors.Is(err, errVolumeMissing):
			f.failed[id] = err.Error()
		default:
			f.resched[id] = "volumes not ready: " + err.Error()
		}
	}
	f.mu.Unlock()
	if !mine {
		return
	}
	if err != nil {
		f.log.Warn("the slot's volumes could not be prepared", "slot", id, "error", err)
	} else if note != "" {
		f.log.Info("volumes ready", "slot", id, "how", note)
		rec := AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: h.unit.Unit.Name, Slot: id, Action: "restore",
			From: h.prevNode, To: f.cfg.Node, Reason: note, TermIndex: h.term.Index})
		// The record and the acknowledgement the old holder waits for, in
		// one transaction; the record alone when the handoff changed.
		ok, _, _, err := f.cfg.Client.Txn().Txn(append(api.TxnOps{rec}, ack...), (&api.QueryOptions{}).WithContext(ctx))
		if err == nil && !ok && len(ack) > 0 {
			_, _, _, err = f.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(ctx))
		}
		if err != nil {
			f.log.Warn("could not record the restore", "slot", id, "error", err)
		}
	}
	f.wake()
}

// VolumesPrefix holds the records of the periodic copies of each volume.
const VolumesPrefix = Prefix + "volumes/"

// CopiesKey is volumes/<unit>/<k>/<volume>/copies.
func CopiesKey(unit string, k int, vol string) string {
	return VolumesPrefix + unit + "/" + strconv.Itoa(k) + "/" + vol + "/copies"
}

// VolumeCopy is one periodic copy of a volume, held read-only by Node.
type VolumeCopy struct {
	Node    string    `json:"node"`
	URL     string    `json:"url"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	TakenAt time.Time `json:"taken_at"`
	// TermIndex is the generation of the copied data: the fencing index
	// of the holder's term (0 from a mariposa that did not record it).
	TermIndex uint64 `json:"term_index,omitempty"`
}

// DecodeCopies reads a copies record; an error for a value that is not one.
func DecodeCopies(b []byte) ([]VolumeCopy, error) {
	var cs []VolumeCopy
	if err := json.Unmarshal(b, &cs); err != nil {
		return nil, fmt.Errorf("copies: %w", err)
	}
	for _, c := range cs {
		if c.Node == "" || c.URL == "" || len(c.SHA256) != 64 || c.Size < 0 {
			return nil, errors.New("copies: an entry without node, url, checksum or size")
		}
	}
	return cs, nil
}

// apiURLOf is the node API of a mariposa service entry (meta http_api),
// with the node's address in place of an unspecified host.
func apiURLOf(e *api.ServiceEntry) string {
	raw := e.Service.Meta[supervisor.HTTPAPIMetaKey]
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && e.Node.Address != "" {
		u.Host = net.JoinHostPort(e.Node.Address, port)
	}
	return u.String()
}

// copyLoop pushes periodic copies of slot id's volumes with replicas to
// other nodes while this node holds the slot (h), every interval, and
// records them in volumes/<unit>/<k>/<volume>/copies with a check of the
// slot's session: only the holder records copies.
func (f *Fleet) copyLoop(ctx context.Context, id string, h *heldSlot) {
	vols, _ := volumesOf(h.unit)
	every := time.Duration(0)
	for _, v := range vols {
		if v.Replicas > 0 && (every == 0 || v.Interval < every) {
			every = v.Interval
		}
	}
	if every <= 0 {
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.term.Lost():
			return
		case <-t.C:
		}
		f.mu.Lock()
		mine := f.held[id] == h
		f.mu.Unlock()
		if !mine {
			return
		}
		for _, v := range vols {
			if v.Replicas > 0 {
				if err := f.pushCopies(ctx, h, v); err != nil && ctx.Err() == nil {
					f.log.Warn("a periodic copy failed; trying again at the next interval", "slot", id, "volume", v.Name, "error", err)
				}
			}
		}
		t.Reset(every)
	}
}

// pushCopies pushes one periodic copy of h's volume v (PushCopies), its
// snapshot hook run as the volumes' owner.
func (f *Fleet) pushCopies(ctx context.Context, h *heldSlot, v *schema.Volume) error {
	owner, err := volumeOwner(h.unit)
	if err != nil {
		return err
	}
	return PushCopies(ctx, CopyPush{Client: f.cfg.Client, Store: f.cfg.Volumes, Self: f.cfg.Node, Unit: h.unit.Unit.Name, K: h.k,
		Volume: v, Key: h.term.Key, Session: h.term.Session, TermIndex: h.term.Index, Owner: owner, Log: f.log})
}

// volumeOwner is the user a unit's volumes belong to, and their hooks run
// as: the user and group of its first service that has one (nil: none,
// mariposa's own).
func volumeOwner(u UnitSpec) (*volume.RunAs, error) {
	for _, svc := range u.Services {
		if svc.User == "" && svc.UserGroup == "" {
			continue
		}
		id, err := users.Resolve(svc.User, svc.UserGroup)
		if err != nil {
			return nil, fmt.Errorf("the volumes' owner: service %s: %w", svc.Name, err)
		}
		return &volume.RunAs{Uid: id.Uid, Gid: id.Gid, Groups: id.Groups}, nil
	}
	return nil, nil
}
