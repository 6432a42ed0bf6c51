package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
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
//	                                             hand the slot to the supervisor
//
// The unlock is the fence: Consul refuses it unless the session holds the
// lock, and with it the whole transaction, so a holder that lost its slot
// (frozen, cut off) cannot publish a handoff, and the lock_index says whether a
// handoff was written by the holder just before this one: if not, the
// last holder was lost without one, and on_missing decides.

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

// prepareVolumes readies slot h's volumes on this node before its
// instance starts: a planned handoff is restored from the old holder, the
// data of a slot this node held last is kept, and otherwise on_missing
// decides. It returns what it did, for the record.
func (f *Fleet) prepareVolumes(ctx context.Context, h *heldSlot) (string, error) {
	store := f.cfg.Volumes
	u, k := h.unit.Unit.Name, h.k
	vols, snapshotted := volumesOf(h.unit)
	for _, v := range vols {
		if _, err := store.Ensure(u, k, v.Path); err != nil {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	if !snapshotted {
		return "", nil
	}
	kv, _, err := f.cfg.Client.KV().Get(HandoffKey(u, k), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("read the handoff: %w", err)
	}
	var ho *Handoff
	if kv != nil {
		d, err := DecodeHandoff(kv.Value)
		if err != nil {
			f.log.Warn("ignoring a handoff that cannot be read", "slot", slotName(u, k), "error", err)
		} else {
			ho = &d
		}
	}
	planned := ho != nil && ho.LockIndex+1 == h.term.LockIndex
	switch {
	case planned && ho.Node == f.cfg.Node:
		return "kept this node's data: it handed the slot off itself", nil
	case planned:
		env := os.Environ()
		var done []string
		for _, v := range vols {
			if v.Handoff != schema.HandoffSnapshot {
				continue
			}
			m, ok := ho.Volumes[v.Name]
			if !ok {
				return "", fmt.Errorf("volume %s: the handoff from %s has no snapshot of it", v.Name, ho.Node)
			}
			src := volume.Source{URL: volume.SnapshotURL(ho.URL, u, k, v.Path, m.SHA256), SHA256: m.SHA256, Size: m.Size,
				Header: http.Header{SessionHeader: {h.term.Session}}}
			t0 := f.cfg.Now()
			got, err := store.Restore(ctx, u, k, v.Path, src, v.Restore, env, v.RestoreTimeout)
			if err != nil {
				return "", fmt.Errorf("volume %s: restore from %s: %w", v.Name, ho.Node, err)
			}
			done = append(done, fmt.Sprintf("%s (%d bytes from %s in %s)", v.Name, got.Size, ho.Node, f.cfg.Now().Sub(t0).Round(time.Millisecond)))
		}
		return fmt.Sprintf("restored the handoff of %s: %v", ho.At.Format(time.RFC3339), done), nil
	case ho == nil && h.prevNode == "":
		return "", nil // the slot's first holder: its volumes start empty
	case h.prevNode == f.cfg.Node:
		// This node held the slot last and lost it without a handoff (its
		// mariposa restarted, its session expired): its data is the newest.
		return "kept this node's data: it held the slot last", nil
	}
	// Unplanned: the last holder was lost with the data.
	var notes []string
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		switch v.OnMissing {
		case schema.OnMissingFail:
			return "", fmt.Errorf("%w: volume %s: the last holder (%s) gave no handoff, and on_missing is \"fail\"", errVolumeMissing, v.Name, h.prevNode)
		case schema.OnMissingEmpty:
			if err := emptyVolume(store, u, k, v.Path); err != nil {
				return "", err
			}
			notes = append(notes, v.Name+" started empty (on_missing = \"empty\")")
		default:
			// latest: the newest copy there is. Without periodic copies
			// that is an older handoff, when its node still serves it.
			if ho != nil && ho.Node != f.cfg.Node {
				if m, ok := ho.Volumes[v.Name]; ok {
					src := volume.Source{URL: volume.SnapshotURL(ho.URL, u, k, v.Path, m.SHA256), SHA256: m.SHA256, Size: m.Size,
						Header: http.Header{SessionHeader: {h.term.Session}}}
					if _, err := store.Restore(ctx, u, k, v.Path, src, v.Restore, os.Environ(), v.RestoreTimeout); err == nil {
						notes = append(notes, fmt.Sprintf("%s restored from the handoff of %s by %s: the writes since then are lost (%s)",
							v.Name, ho.At.Format(time.RFC3339), ho.Node, f.cfg.Now().Sub(ho.At).Round(time.Second)))
						continue
					} else {
						f.log.Warn("the newest copy could not be restored", "slot", slotName(u, k), "volume", v.Name, "error", err)
					}
				}
			}
			if ho != nil && ho.Node == f.cfg.Node {
				notes = append(notes, fmt.Sprintf("%s kept from this node's handoff of %s: the writes since then are lost (%s)",
					v.Name, ho.At.Format(time.RFC3339), f.cfg.Now().Sub(ho.At).Round(time.Second)))
				continue
			}
			if err := emptyVolume(store, u, k, v.Path); err != nil {
				return "", err
			}
			notes = append(notes, v.Name+" started empty: no copy of its data could be reached (on_missing = \"latest\")")
		}
	}
	return fmt.Sprintf("the last holder (%s) was lost without a handoff: %v", h.prevNode, notes), nil
}

// emptyVolume empties a volume's directory (an old copy of another
// holder's data must not pass for the slot's).
func emptyVolume(store *volume.Store, unit string, k int, path string) error {
	dir := store.Dir(unit, k, path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// handoffOps snapshots the stopped volumes of slot h and returns the
// transaction operation that publishes them with the release, fenced by
// its unlock. Nil when the unit has no volume that moves.
func (f *Fleet) handoffOps(ctx context.Context, h *heldSlot) (api.TxnOps, error) {
	vols, snapshotted := volumesOf(h.unit)
	if !snapshotted || f.cfg.Volumes == nil {
		return nil, nil
	}
	if f.cfg.APIURL == "" {
		return nil, errors.New("this node's HTTP API is off: nothing could serve the snapshot")
	}
	u, k := h.unit.Unit.Name, h.k
	ho := Handoff{Node: f.cfg.Node, URL: f.cfg.APIURL, LockIndex: h.term.LockIndex, TermIndex: h.term.Index,
		Volumes: map[string]volume.Meta{}}
	for _, v := range vols {
		if v.Handoff != schema.HandoffSnapshot {
			continue
		}
		m, err := f.cfg.Volumes.Snapshot(ctx, u, k, v.Path, v.Snapshot, os.Environ())
		if err != nil {
			return nil, fmt.Errorf("volume %s: snapshot: %w", v.Name, err)
		}
		ho.Volumes[v.Name] = m
	}
	ho.At = f.cfg.Now()
	b, err := json.Marshal(ho)
	if err != nil {
		return nil, err
	}
	// The fence is the unlock that comes first in the same transaction
	// (lease.Term.ReleaseWith): Consul refuses it, and so the whole
	// transaction, unless this session holds the slot's lock, as a
	// check-session would (TestHandoffFenced).
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: HandoffKey(u, k), Value: b}}}, nil
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
	note, err := f.prepareVolumes(ctx, h)
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
			h.volumesReady = true
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
		if _, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
			f.log.Warn("could not record the restore", "slot", id, "error", err)
		}
	}
	f.wake()
}
