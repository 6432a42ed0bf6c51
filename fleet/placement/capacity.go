package placement

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mariposa-sh/mariposa/schema"
)

// Reservation is an amount of CPU (millicores: 1000 is one core) and memory
// (MiB): what a slot reserves (its services' resources), what a node
// offers, what its slots hold.
type Reservation struct {
	CPU    int `json:"cpu"`
	Memory int `json:"memory"`
}

// Add is r + o.
func (r Reservation) Add(o Reservation) Reservation {
	return Reservation{CPU: r.CPU + o.CPU, Memory: r.Memory + o.Memory}
}

// Sub is r − o.
func (r Reservation) Sub(o Reservation) Reservation {
	return Reservation{CPU: r.CPU - o.CPU, Memory: r.Memory - o.Memory}
}

// IsZero says whether r reserves nothing.
func (r Reservation) IsZero() bool { return r.CPU <= 0 && r.Memory <= 0 }

// String is "500 millicores cpu, 256 MiB memory" (the parts that are set).
func (r Reservation) String() string {
	var parts []string
	if r.CPU != 0 {
		parts = append(parts, fmt.Sprintf("%d millicores cpu", r.CPU))
	}
	if r.Memory != 0 {
		parts = append(parts, fmt.Sprintf("%d MiB memory", r.Memory))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// ReservationOf is what one instance of each of services reserves: the sum
// of their resources' cpu and memory.
func ReservationOf(services []*schema.Service) Reservation {
	var r Reservation
	for _, s := range services {
		if s != nil && s.Resources != nil {
			r.CPU += max(s.Resources.CPU, 0)
			r.Memory += max(s.Resources.Memory, 0)
		}
	}
	return r
}

// Capacity is what a node offers to slots, as its mariposa registration's
// meta says (CapacityMeta).
type Capacity struct {
	// Total is what the host has: its cores × 1000 and its MemTotal.
	Total Reservation `json:"total"`
	// Reserve is the operator's reserve (mariposa run -reserve), kept for
	// the system and everything mariposa does not run.
	Reserve Reservation `json:"reserve"`
	// Local is what the node's own services reserve (those without a
	// count in its files: they run there whatever placement does).
	Local Reservation `json:"local"`
}

// Allocatable is what slots may reserve on the node: Total − Reserve −
// Local.
func (c Capacity) Allocatable() Reservation { return c.Total.Sub(c.Reserve).Sub(c.Local) }

// Meta keys of mariposa's own registration that carry its node's capacity.
// A node whose registration lacks capacity_cpu or capacity_memory (a
// mariposa older than capacity placement) has an unknown capacity, which
// placement counts as not limited.
const (
	MetaCapacityCPU    = "capacity_cpu"
	MetaCapacityMemory = "capacity_memory"
	MetaReserveCPU     = "reserve_cpu"
	MetaReserveMemory  = "reserve_memory"
	MetaLocalCPU       = "local_cpu"
	MetaLocalMemory    = "local_memory"
)

// CapacityMeta is c as registration meta.
func CapacityMeta(c Capacity) map[string]string {
	itoa := strconv.Itoa
	return map[string]string{
		MetaCapacityCPU: itoa(c.Total.CPU), MetaCapacityMemory: itoa(c.Total.Memory),
		MetaReserveCPU: itoa(c.Reserve.CPU), MetaReserveMemory: itoa(c.Reserve.Memory),
		MetaLocalCPU: itoa(c.Local.CPU), MetaLocalMemory: itoa(c.Local.Memory),
	}
}

// ParseCapacityMeta reads a node's capacity from its registration's meta:
// nil (unknown: not limited) without capacity_cpu and capacity_memory or
// when one of the six is not a number ≥ 0; an absent reserve or local
// value is 0.
func ParseCapacityMeta(meta map[string]string) *Capacity {
	if meta[MetaCapacityCPU] == "" || meta[MetaCapacityMemory] == "" {
		return nil
	}
	var c Capacity
	for _, f := range []struct {
		key string
		dst *int
	}{
		{MetaCapacityCPU, &c.Total.CPU}, {MetaCapacityMemory, &c.Total.Memory},
		{MetaReserveCPU, &c.Reserve.CPU}, {MetaReserveMemory, &c.Reserve.Memory},
		{MetaLocalCPU, &c.Local.CPU}, {MetaLocalMemory, &c.Local.Memory},
	} {
		s, ok := meta[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil
		}
		*f.dst = n
	}
	return &c
}

// capacityVerdict says whether a node with capacity c (nil: unknown, not
// limited), whose slots already reserve used, has room for need: "" when
// it has, else "needs 256 MiB memory, 120 MiB free" (and the same for
// cpu, "; "-joined).
func capacityVerdict(need Reservation, c *Capacity, used Reservation) string {
	if c == nil || need.IsZero() {
		return ""
	}
	free := c.Allocatable().Sub(used)
	var short []string
	if need.CPU > 0 && need.CPU > free.CPU {
		short = append(short, fmt.Sprintf("needs %d millicores cpu, %d free", need.CPU, max(free.CPU, 0)))
	}
	if need.Memory > 0 && need.Memory > free.Memory {
		short = append(short, fmt.Sprintf("needs %d MiB memory, %d MiB free", need.Memory, max(free.Memory, 0)))
	}
	return strings.Join(short, "; ")
}

// fullness is how full a node of capacity c would be with used + need
// reserved by its slots: the mean over cpu and memory (those the node has)
// of (Local + used + need) / (Total − Reserve), each at most 1; 0 for an
// unknown capacity.
func fullness(need Reservation, c *Capacity, used Reservation) float64 {
	if c == nil {
		return 0
	}
	offer := c.Total.Sub(c.Reserve)
	taken := c.Local.Add(used).Add(need)
	sum, k := 0.0, 0
	for _, d := range [][2]int{{offer.CPU, taken.CPU}, {offer.Memory, taken.Memory}} {
		if d[0] <= 0 {
			continue
		}
		sum += min(max(float64(d[1])/float64(d[0]), 0), 1)
		k++
	}
	if k == 0 {
		return 0
	}
	return sum / float64(k)
}

// ParseReservation reads "cpu=500,memory=512" (either part may be left
// out; cpu in millicores, memory in MiB): mariposa run -reserve, and
// $MARIPOSA_CAPACITY.
func ParseReservation(s string) (Reservation, error) {
	var r Reservation
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return Reservation{}, fmt.Errorf("%q: want cpu=<millicores> or memory=<MiB>", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return Reservation{}, fmt.Errorf("%q: %s wants a whole number ≥ 0", part, k)
		}
		if seen[k] {
			return Reservation{}, fmt.Errorf("%q: %s given twice", part, k)
		}
		seen[k] = true
		switch k {
		case "cpu":
			r.CPU = n
		case "memory":
			r.Memory = n
		default:
			return Reservation{}, fmt.Errorf("%q: unknown resource %q (cpu in millicores, memory in MiB)", part, k)
		}
	}
	return r, nil
}

// LocalReservation is what a node's own services (those without a count:
// they run on the node whatever placement does) reserve, one instance each.
func LocalReservation(cfg *schema.Config) Reservation {
	if cfg == nil {
		return Reservation{}
	}
	var local []*schema.Service
	for _, s := range cfg.Services {
		if s.Placement == nil {
			local = append(local, s)
		}
	}
	return ReservationOf(local)
}
