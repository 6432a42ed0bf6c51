package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
)

// The I/O of volumes: the step machine's executor (fleet/executor's
// volumes.go) calls these for the periodic copies, the restore of the
// newest copy after an unplanned loss and the volumes' owner.

// CopyPeers picks n fleet nodes other than self to push slot k's copies
// to, with their node API URLs, from the passing entries of the mariposa
// service (es): in name order, rotated by k so that the slots of a unit
// spread their copies.
func CopyPeers(es []*api.ServiceEntry, self string, k, n int) []VolumeCopy {
	var peers []VolumeCopy
	for _, e := range es {
		if e.Node == nil || e.Service == nil || e.Node.Node == self || e.Service.Meta[checks.FleetMetaKey] != checks.FleetMetaValue {
			continue // only a fleet node keeps copies
		}
		u := apiURLOf(e)
		if u == "" {
			continue
		}
		peers = append(peers, VolumeCopy{Node: e.Node.Node, URL: u})
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
	if len(peers) == 0 {
		return nil
	}
	var out []VolumeCopy
	for i := 0; i < n && i < len(peers); i++ {
		out = append(out, peers[(k+i)%len(peers)])
	}
	return out
}

// CopyPush is one periodic copy of a held slot's volume (PushCopies).
type CopyPush struct {
	Client *api.Client
	Store  *volume.Store
	Self   string
	Unit   string
	K      int
	Volume *schema.Volume
	// Key and Session are the slot key and the hold's session: the
	// copies are recorded only while Session holds Key. TermIndex is the
	// hold's fencing token: the copy's generation.
	Key       string
	Session   string
	TermIndex uint64
	// Owner is the user the volume belongs to (VolumeOwner; nil:
	// mariposa's own): its snapshot hook runs as it.
	Owner *volume.RunAs
	Log   hclog.Logger
}

// PushCopies takes one snapshot file of the volume (after its snapshot
// hook, run as Owner), pushes it to Volume.Replicas live
// fleet nodes (CopyPeers), then records the copies that arrived in
// CopiesKey, in a transaction that checks the slot's session: only the
// holder records copies.
func PushCopies(ctx context.Context, p CopyPush) error {
	v, u, k := p.Volume, p.Unit, p.K
	log := p.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	m, err := p.Store.SnapshotFile(volume.WithRunAs(ctx, p.Owner), u, k, v.Path, v.Snapshot, os.Environ())
	if err != nil {
		return err
	}
	es, _, err := p.Client.Health().Service("mariposa", "", true, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("finding peers: %w", err)
	}
	var got []VolumeCopy
	for _, peer := range CopyPeers(es, p.Self, k, v.Replicas) {
		pctx, cancel := context.WithTimeout(ctx, v.RestoreTimeout)
		_, err := p.Store.Push(pctx, u, k, v.Path, volume.Peer{URL: peer.URL, Header: http.Header{SessionHeader: {p.Session}}})
		cancel()
		if err != nil {
			log.Warn("could not push a copy", "slot", slotName(u, k), "volume", v.Name, "to", peer.Node, "error", err)
			continue
		}
		got = append(got, VolumeCopy{Node: peer.Node, URL: peer.URL, SHA256: m.SHA256, Size: m.Size, TakenAt: m.TakenAt, TermIndex: p.TermIndex})
	}
	if len(got) == 0 {
		return errors.New("no peer took the copy")
	}
	b, err := json.Marshal(got)
	if err != nil {
		return err
	}
	ok, resp, _, err := p.Client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: p.Key, Session: p.Session}},
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

// LatestCopy is the newest recorded copy of a volume, if any (a record
// that cannot be read is logged and taken as none).
func LatestCopy(ctx context.Context, c *api.Client, unit string, k int, vol string, log hclog.Logger) (*VolumeCopy, error) {
	p, _, err := c.KV().Get(CopiesKey(unit, k, vol), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || p == nil {
		return nil, err
	}
	cs, err := DecodeCopies(p.Value)
	if err != nil {
		if log != nil {
			log.Warn("ignoring a copies record that cannot be read", "slot", slotName(unit, k), "volume", vol, "error", err)
		}
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

// LatestRestore is a new holder's restore of one volume after an
// unplanned loss with on_missing = "latest" (RestoreLatest).
type LatestRestore struct {
	Client *api.Client
	Store  *volume.Store
	Self   string
	// Session holds the slot now: the nodes serving a copy check it.
	Session string
	Unit    string
	K       int
	Volume  *schema.Volume
	// Handoff is the slot's last handoff (nil: none): an older one's
	// snapshot is a candidate while its node serves it.
	Handoff *Handoff
	Now     func() time.Time
	Log     hclog.Logger
}

// RestoreLatest readies the volume from the newest copy of its data there
// is (newestFirst): this node's own, a periodic copy on another node, or
// an older handoff's snapshot where its node still serves it; an older
// one when the newest cannot be fetched or verified; empty when there is
// none. It says what it did (hooks run as ctx's volume.RunAs).
func RestoreLatest(ctx context.Context, l LatestRestore) (string, error) {
	v, u, k, store := l.Volume, l.Unit, l.K, l.Store
	now := l.Now
	if now == nil {
		now = time.Now
	}
	log := l.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ho := l.Handoff
	var cands []dataCopy
	if c, err := LatestCopy(ctx, l.Client, u, k, v.Name, log); err != nil {
		return "", fmt.Errorf("read the copies of volume %s: %w", v.Name, err)
	} else if c != nil {
		cands = append(cands, dataCopy{Kind: copyPeriodic, From: c.Node, Gen: c.TermIndex, At: c.TakenAt,
			url: volume.LatestCopyURL(c.URL, u, k, v.Path, c.SHA256), sha: c.SHA256, size: c.Size})
	}
	if ho != nil {
		if m, ok := ho.Volumes[v.Name]; ok && ho.Node != l.Self {
			cands = append(cands, dataCopy{Kind: copyHandoff, From: ho.Node, Gen: ho.TermIndex, At: ho.At,
				url: volume.SnapshotURL(ho.URL, u, k, v.Path, m.SHA256), sha: m.SHA256, size: m.Size, raw: ho.HookFailed[v.Name] != ""})
		}
	}
	mine, err := store.Generation(u, k, v.Path)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", v.Name, err)
	}
	if mine == 0 && ho != nil && ho.Node == l.Self {
		mine = ho.TermIndex // recorded by no generation: this node's own handoff (an older mariposa)
	}
	if mine != 0 {
		at := time.Time{}
		if ho != nil && ho.TermIndex == mine {
			at = ho.At
		}
		cands = append(cands, dataCopy{Kind: copyLocal, From: l.Self, Gen: mine, At: at})
	}
	newestFirst(cands)
	for _, c := range cands {
		if c.Kind == copyLocal {
			return fmt.Sprintf("%s kept this node's copy (generation %d), the newest there is: the writes after it are lost", v.Name, c.Gen), nil
		}
		src := volume.Source{URL: c.url, SHA256: c.sha, Size: c.size, Header: http.Header{SessionHeader: {l.Session}}}
		hook := v.Restore
		if c.raw {
			hook = nil
		}
		if _, err := store.Restore(ctx, u, k, v.Path, src, hook, os.Environ(), v.RestoreTimeout); err != nil {
			log.Warn("a copy could not be restored; trying an older one", "slot", slotName(u, k), "volume", v.Name, "from", c.From, "error", err)
			continue
		}
		return fmt.Sprintf("%s restored from the copy of %s on %s (generation %d): the writes after it are lost (up to %s)",
			v.Name, c.At.Format(time.RFC3339), c.From, c.Gen, now().Sub(c.At).Round(time.Second)), nil
	}
	if err := store.Empty(u, k, v.Path); err != nil {
		return "", err
	}
	return v.Name + " started empty: no copy of its data could be reached (on_missing = \"latest\")", nil
}

// VolumeOwner is the user a unit's volumes belong to, and their hooks run
// as: the user and group of its first service that has one (nil: none,
// mariposa's own).
func VolumeOwner(u UnitSpec) (*volume.RunAs, error) { return volumeOwner(u) }
