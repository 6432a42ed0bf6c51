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
	// ClaimedPrefix holds claimed/<unit>/<k> (ClaimedKey).
	ClaimedPrefix = Prefix + "claimed/"
	// StormKey is control/storm: present while the storm brake is engaged.
	StormKey = ControlPrefix + "storm"
	// StormLiftedKey is control/storm-lifted: the last brake mariposa
	// resume lifted (StormLifted).
	StormLiftedKey = ControlPrefix + "storm-lifted"
	// TakeoversKey is control/takeovers: the takeover budget's log.
	TakeoversKey = ControlPrefix + "takeovers"
)

// SpecKey is deploy/<name>/spec/<n>: an immutable reified spec.
func SpecKey(name string, n uint64) string {
	return DeployPrefix + name + "/spec/" + strconv.FormatUint(n, 10)
}

// DesiredKey is deploy/<name>/desired: which spec the fleet runs.
func DesiredKey(name string) string { return DeployPrefix + name + "/desired" }

// ClaimedKey is claimed/<unit>/<k>: set by every claim's transaction to
// the claimer's node name, never locked, so that it outlives an
// invalidation, which deletes the slot key with its holder's session. A
// slot whose key is missing and whose claimed key names a node was lost
// with that node (ReadState).
func ClaimedKey(unit string, k int) string { return ClaimedPrefix + unit + "/" + strconv.Itoa(k) }

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

// A unit's deployment under the step machine (fleet/agent, CLUSTER.md
// section 12): per unit, not per deployment name, under UnitsPrefix:
//
//	units/<unit>/record      the unit's deployment record (UnitRecord)
//	units/<unit>/status/<k>  what the holder of slot k says about its hold
//	units/<unit>/tokens/<t>  rollout token t, locked by a holder's session
//
// Its own prefix, not deploy/: a unit is often named like its deployment
// (deployment "web", unit "web"), and a watch on deploy/<unit>/ would then
// receive the deployment's specs (up to 512 KiB each) with every change;
// nor rollout/, where the coordinated reloads keep their tokens and
// operators their manual health marks (rollout/<unit>/...).
// Nothing else lives under units/, so the watch on units/<unit>/ answers
// exactly the unit's record, statuses and tokens.
const UnitsPrefix = Prefix + "units/"

// UnitDeployPrefix is units/<unit>/: a unit's deployment record, its
// holders' statuses and its rollout tokens.
func UnitDeployPrefix(unit string) string { return UnitsPrefix + unit + "/" }

// RecordKey is units/<unit>/record, the unit's deployment record.
func RecordKey(unit string) string { return UnitDeployPrefix(unit) + "record" }

// UnitStatusKey is units/<unit>/status/<k>: the step machine's word of
// the holder of slot k on its hold.
func UnitStatusKey(unit string, k int) string {
	return UnitDeployPrefix(unit) + "status/" + strconv.Itoa(k)
}

// TokenKey is units/<unit>/tokens/<t>, rollout token t of the unit.
func TokenKey(unit string, t int) string { return UnitDeployPrefix(unit) + "tokens/" + strconv.Itoa(t) }

// Kinds of key under UnitDeployPrefix (ParseUnitDeployKey).
const (
	UnitKeyRecord = "record"
	UnitKeyStatus = "status"
	UnitKeyToken  = "tokens"
)

// ParseUnitDeployKey says what a key under UnitDeployPrefix(unit) is: its
// kind and, for a status or a token, its number; ok false for any other
// key.
func ParseUnitDeployKey(unit, key string) (kind string, n int, ok bool) {
	rest, found := strings.CutPrefix(key, UnitDeployPrefix(unit))
	if !found {
		return "", 0, false
	}
	if rest == UnitKeyRecord {
		return UnitKeyRecord, 0, true
	}
	kind, num, found := strings.Cut(rest, "/")
	if !found || (kind != UnitKeyStatus && kind != UnitKeyToken) {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", 0, false
	}
	return kind, n, true
}
