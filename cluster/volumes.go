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
	"path/filepath"
	"sort"
	"strconv"
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
	owner, err := volumeOwner(h.unit)
	if err != nil {
		return "", err
	}
	ctx = volume.WithRunAs(ctx, owner)
	for _, v := range vols {
		live, err := store.Ensure(u, k, v.Path)
		if err == nil {
			err = volume.Own(live, owner)
		}
		if err != nil {
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
			// latest: the newest copy there is: a periodic copy on another
			// node, or an older handoff's snapshot when its node still
			// serves it.
			type candidate struct {
				from, url, sha string
				size           int64
				at             time.Time
			}
			var cands []candidate
			if c, err := f.latestCopy(ctx, u, k, v.Name); err != nil {
				return "", fmt.Errorf("read the copies of volume %s: %w", v.Name, err)
			} else if c != nil {
				cands = append(cands, candidate{c.Node, volume.LatestCopyURL(c.URL, u, k, v.Path, c.SHA256), c.SHA256, c.Size, c.TakenAt})
			}
			if ho != nil {
				if m, ok := ho.Volumes[v.Name]; ok && ho.Node != f.cfg.Node {
					cands = append(cands, candidate{ho.Node, volume.SnapshotURL(ho.URL, u, k, v.Path, m.SHA256), m.SHA256, m.Size, ho.At})
				}
			}
			sort.Slice(cands, func(i, j int) bool { return cands[i].at.After(cands[j].at) })
			restored := false
			for _, c := range cands {
				src := volume.Source{URL: c.url, SHA256: c.sha, Size: c.size, Header: http.Header{SessionHeader: {h.term.Session}}}
				if _, err := store.Restore(ctx, u, k, v.Path, src, v.Restore, os.Environ(), v.RestoreTimeout); err != nil {
					f.log.Warn("a copy could not be restored; trying an older one", "slot", slotName(u, k), "volume", v.Name, "from", c.from, "error", err)
					continue
				}
				notes = append(notes, fmt.Sprintf("%s restored from the copy of %s on %s: the writes after it are lost (up to %s)",
					v.Name, c.at.Format(time.RFC3339), c.from, f.cfg.Now().Sub(c.at).Round(time.Second)))
				restored = true
				break
			}
			if restored {
				continue
			}
			if ho != nil && ho.Node == f.cfg.Node {
				notes = append(notes, fmt.Sprintf("%s kept from this node's handoff of %s: the writes after it are lost (up to %s)",
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
	owner, err := volumeOwner(h.unit)
	if err != nil {
		return nil, err
	}
	ctx = volume.WithRunAs(ctx, owner)
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
		if _, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{rec}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
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

// copyPeers picks n live supervisors other than this node to push slot k's
// copies to, with their node API URLs: the live ones in name order,
// rotated by k so that the slots of a unit spread their copies.
func (f *Fleet) copyPeers(ctx context.Context, k, n int) ([]VolumeCopy, error) {
	es, _, err := f.cfg.Client.Health().Service("mariposa", "", true, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	var peers []VolumeCopy
	for _, e := range es {
		if e.Node.Node == f.cfg.Node {
			continue
		}
		u := apiURLOf(e)
		if u == "" {
			continue
		}
		peers = append(peers, VolumeCopy{Node: e.Node.Node, URL: u})
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
	if len(peers) == 0 {
		return nil, nil
	}
	var out []VolumeCopy
	for i := 0; i < n && i < len(peers); i++ {
		out = append(out, peers[(k+i)%len(peers)])
	}
	return out, nil
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

// pushCopies takes one snapshot file of v and pushes it to v.Replicas
// peers, then records the copies that arrived.
func (f *Fleet) pushCopies(ctx context.Context, h *heldSlot, v *schema.Volume) error {
	u, k := h.unit.Unit.Name, h.k
	m, err := f.cfg.Volumes.SnapshotFile(ctx, u, k, v.Path, v.Snapshot, os.Environ())
	if err != nil {
		return err
	}
	peers, err := f.copyPeers(ctx, k, v.Replicas)
	if err != nil {
		return fmt.Errorf("finding peers: %w", err)
	}
	var got []VolumeCopy
	for _, p := range peers {
		pctx, cancel := context.WithTimeout(ctx, v.RestoreTimeout)
		_, err := f.cfg.Volumes.Push(pctx, u, k, v.Path, volume.Peer{URL: p.URL, Header: http.Header{SessionHeader: {h.term.Session}}})
		cancel()
		if err != nil {
			f.log.Warn("could not push a copy", "slot", slotName(u, k), "volume", v.Name, "to", p.Node, "error", err)
			continue
		}
		got = append(got, VolumeCopy{Node: p.Node, URL: p.URL, SHA256: m.SHA256, Size: m.Size, TakenAt: m.TakenAt})
	}
	if len(got) == 0 {
		return errors.New("no peer took the copy")
	}
	b, err := json.Marshal(got)
	if err != nil {
		return err
	}
	ok, resp, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: h.term.Key, Session: h.term.Session}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: CopiesKey(u, k, v.Name), Value: b}},
	}, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("recording the copies: %v", resp.Errors)
	}
	return nil
}

// latestCopy is the newest recorded copy of a volume, if any.
func (f *Fleet) latestCopy(ctx context.Context, unit string, k int, vol string) (*VolumeCopy, error) {
	p, _, err := f.cfg.Client.KV().Get(CopiesKey(unit, k, vol), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || p == nil {
		return nil, err
	}
	cs, err := DecodeCopies(p.Value)
	if err != nil {
		f.log.Warn("ignoring a copies record that cannot be read", "slot", slotName(unit, k), "volume", vol, "error", err)
		return nil, nil
	}
	var best *VolumeCopy
	for i := range cs {
		if best == nil || cs[i].TakenAt.After(best.TakenAt) {
			best = &cs[i]
		}
	}
	return best, nil
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
