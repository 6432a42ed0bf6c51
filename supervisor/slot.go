package supervisor

import (
	"strconv"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// SlotInfo identifies a count slot (CLUSTER.md section 3) that this node
// holds: the fleet layer acquires it, the instance runs in it.
type SlotInfo struct {
	// Unit is the service, or the group, whose slot this is.
	Unit  string
	Index int
	// Key is the KV key locked by Session; Term is its ModifyIndex right
	// after the acquisition: the child's fencing token.
	Key     string
	Session string
	Term    uint64
	// VolumeDir is the slot's directory in the node's volume store, when
	// its unit has volume blocks: each volume is VolumeDir/<path>, given
	// to the instance as MARIPOSA_VOLUME_<NAME>. The fleet hands the slot
	// over only once its volumes are ready (restored when they moved).
	VolumeDir string
	// Volumes says how the volumes were made ready when it was more than
	// finding them in place ("restored from the copy of ... taken 7s
	// before"): the supervisor check carries it.
	Volumes string
}

// Name is "<unit>/<k>".
func (s *SlotInfo) Name() string { return s.Unit + "/" + strconv.Itoa(s.Index) }

// Slot is a held slot as the supervisor needs it.
type Slot struct {
	SlotInfo
	// Lost and Expired are the hold's channels for an exclusive slot: the
	// process stops when Lost closes, with SIGKILL at once when Expired
	// closes (the slot may be another node's from then on). Both nil for
	// a non-exclusive slot, whose process keeps running while Consul
	// cannot be reached: the fleet layer withdraws it when it must stop.
	Lost, Expired <-chan struct{}
	// Err says why the hold ended, once Lost is closed; may be nil.
	Err func() error
	// Deadline, for an exclusive slot, is the moment the hold's last
	// confirmation stops covering the process (lease.Term.StrictDeadline):
	// an upgrade in place hands it over, and the next image kills the
	// process then unless it confirmed the hold again. nil otherwise.
	Deadline func() time.Time
}

// SlotInstance is one instance the fleet layer asks this node to run: a
// service of a cluster unit, in a slot the node holds. A group's members
// share one slot: one SlotInstance each, with the same Slot.
type SlotInstance struct {
	Service *schema.Service
	Slot    Slot
}

// instanceKey names an instance within the runner: the service name, or
// "<service>/<k>" for an instance in a count slot.
func instanceKey(svc *schema.Service, slot *SlotInfo) string {
	if slot == nil {
		return svc.Name
	}
	return svc.Name + "/" + strconv.Itoa(slot.Index)
}

// slotServiceID is the Consul service ID of an instance in a slot:
// "<service>-<k>", the same on whichever node holds the slot.
func slotServiceID(svc *schema.Service, slot *SlotInfo) string {
	return svc.Name + "-" + strconv.Itoa(slot.Index)
}
