package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// The KV layout under Prefix (CLUSTER.md section 2). One ACL policy covers
// it: key_prefix "mariposa/" write, session write, service write.
const (
	Prefix        = "mariposa/"
	DeployPrefix  = Prefix + "deploy/"
	SlotsPrefix   = Prefix + "slots/"
	PenaltyPrefix = Prefix + "penalty/"
	AuditPrefix   = Prefix + "audit/"
	ControlPrefix = Prefix + "control/"
	// StormKey is control/storm: present while the storm brake is engaged.
	StormKey = ControlPrefix + "storm"
	// TakeoversKey is control/takeovers: the takeover budget's log.
	TakeoversKey = ControlPrefix + "takeovers"
)

// SpecKey is deploy/<name>/spec/<n>: an immutable reified spec.
func SpecKey(name string, n uint64) string {
	return DeployPrefix + name + "/spec/" + strconv.FormatUint(n, 10)
}

// DesiredKey is deploy/<name>/desired: which spec the fleet runs.
func DesiredKey(name string) string { return DeployPrefix + name + "/desired" }

// SlotKey is slots/<unit>/<k>: the lock of slot k of a unit.
func SlotKey(unit string, k int) string { return SlotsPrefix + unit + "/" + strconv.Itoa(k) }

// StatusKey is slots/<unit>/<k>/status: what the holder of slot k says
// about its hold (HoldStatus), beside the lock key, which is never written
// while held.
func StatusKey(unit string, k int) string { return SlotKey(unit, k) + statusSuffix }

const statusSuffix = "/status"

// PenaltyKey is penalty/<unit>/<node>.
func PenaltyKey(unit, node string) string { return PenaltyPrefix + unit + "/" + node }

// ParseSlotKey splits a slot's lock key slots/<unit>/<k>; false for any
// other key, a slot's status key among them.
func ParseSlotKey(key string) (unit string, k int, ok bool) { return parseSlotKey(key) }

// parseSlotKey splits slots/<unit>/<k>.
func parseSlotKey(key string) (unit string, k int, ok bool) {
	rest, found := strings.CutPrefix(key, SlotsPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	k, err := strconv.Atoi(rest[i+1:])
	if err != nil || k < 0 || strconv.Itoa(k) != rest[i+1:] {
		return "", 0, false
	}
	return rest[:i], k, true
}

// ParseSlot reads "<unit>/<k>" as operators write it.
func ParseSlot(s string) (unit string, k int, err error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("%q is not a slot: write SERVICE/K, e.g. api/2", s)
	}
	k, err = strconv.Atoi(s[i+1:])
	if err != nil || k < 0 {
		return "", 0, fmt.Errorf("%q is not a slot: K must be a number from 0, e.g. api/2", s)
	}
	return s[:i], k, nil
}
