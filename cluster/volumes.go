package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/users"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Volumes: data that belongs to a slot (website/stateful.md, CLUSTER.md
// section 8). The fleet's step machine (fleet/agent decides, fleet/executor
// does it) prepares a claimed slot's volumes before it hands the slot to
// the supervisor, and publishes a handoff when it gives a slot up after its
// instance stopped; this file holds the layout, the codecs and the pure
// rules it uses:
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

// PlannedFor: h is the handoff left for the term of lockIndex and fencing
// index term: written by the term just before it (its lock index one
// less), and restored by no other term. chooseData restores only such a
// handoff, and a holder whose volumes were never ready passes on only
// such a one.
func (h *Handoff) PlannedFor(lockIndex, term uint64) bool {
	return h.LockIndex+1 == lockIndex && (h.Restored == nil || h.Restored.TermIndex == term)
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
	// LockIndex is this node's term's (the slot key's LockIndex); Term
	// its fencing index (0: unknown).
	LockIndex uint64
	Term      uint64
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
//
// A handoff another term has restored is not planned for this one, though
// the lock indexes say so: that term ran from the data and moved it on,
// and a slot key deleted with its holder's session starts its LockIndex
// over, so a later term can have the one after the handoff's (simulator
// seed 323: every later holder fetched the stale handoff from a node that
// served it no more, and the slot never ran again).
func chooseData(c dataCandidates) (dataChoice, string) {
	ho := c.Handoff
	switch {
	case ho != nil && ho.PlannedFor(c.LockIndex, c.Term):
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

// HandoffClaimWindow is how long a stopping holder that handed its data
// off waits for another node to claim the slot before it stops serving
// the snapshot; once one has, it waits up to the volumes' longest
// restore_timeout more for that node to say it has the data.
const HandoffClaimWindow = 30 * time.Second

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
