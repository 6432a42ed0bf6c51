package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// UpdateBlock is a unit's update block as its deployment record carries it
// (schema.Update's rollout part).
type UpdateBlock struct {
	MaxParallel     int           `json:"max_parallel"`
	AutoPromote     bool          `json:"auto_promote,omitempty"`
	AutoRevert      bool          `json:"auto_revert,omitempty"`
	MinHealthyTime  time.Duration `json:"min_healthy_time"`
	HealthyDeadline time.Duration `json:"healthy_deadline"`
	// ProgressDeadline: the deployment fails when no instance became
	// healthy at its version for this long (zero: never).
	ProgressDeadline time.Duration `json:"progress_deadline,omitempty"`
}

// UnitRecord is a unit's deployment record (RecordKey), the step
// machine's deployment (fleet/agent's Deployment). Version is what the
// unit moves to, From what it ran before (what slots held back by a
// canary phase run), Stable the last version a deployment made successful
// (auto_revert's target). A version written by mariposa deploy is
// "<name>/<n>": the unit's definition in spec n of deployment name
// (VersionSpecKey, UnitOf).
type UnitRecord struct {
	N        uint64      `json:"n"`
	Version  string      `json:"version"`
	From     string      `json:"from"`
	Stable   string      `json:"stable"`
	Status   string      `json:"status"` // Deploy*
	Canaries int         `json:"canaries,omitempty"`
	Promoted bool        `json:"promoted,omitempty"`
	RevertOf uint64      `json:"revert_of,omitempty"`
	Update   UpdateBlock `json:"update"`
	// Count: the unit's count in the spec that wrote the record (0: not
	// said, a record of an older mariposa); the judge counts the slots it
	// needs healthy by it, not by the count a node has heard of (the
	// desired spec's watch may answer after the record's).
	Count   int       `json:"count,omitempty"`
	Started time.Time `json:"started"`
	Reason  string    `json:"reason,omitempty"`
	// Ended: the deployment this record replaced while it ran (failed and
	// reverted, or cancelled by a newer deploy), with its outcome.
	Ended *RecordOutcome `json:"ended,omitempty"`
	// Spec is the operator's deployment that wrote the record,
	// "<name>/<n>" (empty when written otherwise); the judge's moves keep
	// it, a revert included: that is how deploy -wait and status find what
	// became of spec n.
	Spec string `json:"spec,omitempty"`
}

// RecordOutcome is how a unit's deployment ended.
type RecordOutcome struct {
	N       uint64 `json:"n"`
	Version string `json:"version"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
}

// Terminal says whether status ends a deployment.
func Terminal(status string) bool {
	return status == DeploySuccessful || status == DeployFailed || status == DeployCancelled
}

// Target is the version slot k runs under d: the new version while d
// runs (for a canary phase not promoted, only slots below Canaries), the
// old one for the others; after a success the new one. "" after a failure
// (no revert): no slot moves, whatever it runs.
func (d *UnitRecord) Target(k int) string {
	switch d.Status {
	case DeployRunning:
		if d.Canaries > 0 && !d.Promoted && k >= d.Canaries {
			return d.From
		}
		return d.Version
	case DeploySuccessful:
		return d.Version
	}
	return ""
}

// StartVersion is the version a slot claimed under d starts at (the step
// machine's Start): its target, or the version the deployment comes from
// when it has none (a failed deployment); a revert that failed comes from
// the version that failed, and its slots start at the one it reverts to.
func (d *UnitRecord) StartVersion(k int) string {
	if v := d.Target(k); v != "" {
		return v
	}
	if d.RevertOf > 0 {
		return d.Version
	}
	return d.From
}

// DecodeUnitRecord reads a stored record.
func DecodeUnitRecord(b []byte) (*UnitRecord, error) {
	var d UnitRecord
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("not a deployment record: %w", err)
	}
	return &d, nil
}

// Encode is the record as stored.
func (d *UnitRecord) Encode() []byte {
	b, _ := json.Marshal(d)
	return b
}

// SpecVersion is the version "<name>/<n>" of spec n of deployment name.
func SpecVersion(name string, n uint64) string { return name + "/" + strconv.FormatUint(n, 10) }

// ParseSpecVersion splits a version "<name>/<n>"; an error for any other.
func ParseSpecVersion(version string) (name string, n uint64, err error) {
	i := strings.LastIndexByte(version, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("version %q is not <deployment>/<n>", version)
	}
	n, err = strconv.ParseUint(version[i+1:], 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != version[i+1:] {
		return "", 0, fmt.Errorf("version %q is not <deployment>/<n>: n must be a spec number from 1", version)
	}
	return version[:i], n, nil
}

// VersionSpecKey is the key that holds a version's spec: deploy/<name>/spec/<n>.
// Specs are immutable, so a node reads it once per version.
func VersionSpecKey(version string) (string, error) {
	name, n, err := ParseSpecVersion(version)
	if err != nil {
		return "", err
	}
	return SpecKey(name, n), nil
}

// UnitOf resolves a version to a unit's definition: the unit of that name
// in the spec stored at VersionSpecKey(version) (its value, specValue).
// Pure: the caller does the one read.
func UnitOf(version string, specValue []byte, unit string) (UnitSpec, error) {
	name, n, err := ParseSpecVersion(version)
	if err != nil {
		return UnitSpec{}, err
	}
	if specValue == nil {
		return UnitSpec{}, fmt.Errorf("version %s: %s is missing", version, SpecKey(name, n))
	}
	sp, err := DecodeSpec(specValue)
	if err != nil {
		return UnitSpec{}, fmt.Errorf("version %s: %s: %w", version, SpecKey(name, n), err)
	}
	if sp.Name != name || sp.N != n {
		return UnitSpec{}, fmt.Errorf("version %s: %s holds spec %s", version, SpecKey(name, n), SpecVersion(sp.Name, sp.N))
	}
	for _, u := range sp.Units() {
		if u.Unit.Name == unit {
			return u, nil
		}
	}
	return UnitSpec{}, fmt.Errorf("version %s has no unit %q", version, unit)
}

// NextRecord is the record mariposa deploy writes for unit u of spec n of
// deployment name, after prev (nil: the unit has none) and prevUnit (the
// unit in the spec desired before, nil: none). A unit whose definition
// did not change keeps its version, so that none of its instances
// restarts: its record runs again and the judge finds it successful once
// every slot (a new count's too) is healthy at it. A changed unit moves to
// "<name>/<n>", from what it runs, with the canary phase canaries() gives
// it. max_parallel 0 (every instance at once) is the unit's count.
func NextRecord(name string, n uint64, prev *UnitRecord, prevUnit *UnitSpec, u UnitSpec, canaryCount int, now time.Time) UnitRecord {
	r := UnitRecord{N: 1, Version: SpecVersion(name, n), Status: DeployRunning, Started: now, Spec: SpecVersion(name, n),
		Update: updateBlockOf(u), Count: count(u)}
	if prev == nil {
		return r
	}
	r.N, r.Stable, r.From = prev.N+1, prev.Stable, prev.Version
	if prev.Status == DeploySuccessful {
		r.Stable = prev.Version
	}
	if prev.Status == DeployFailed && prev.Stable != "" {
		r.From = prev.Stable
	}
	if prev.Status == DeployRunning {
		r.Ended = &RecordOutcome{N: prev.N, Version: prev.Version, Status: DeployCancelled,
			Reason: "superseded by " + r.Spec}
	}
	if prevUnit != nil && sameRun(*prevUnit, u) && prev.RevertOf == 0 && prev.Status != DeployFailed && prev.Version != "" {
		r.Version, r.From = prev.Version, prev.Version
		return r
	}
	r.Canaries = canaryCount
	return r
}

func updateBlockOf(u UnitSpec) UpdateBlock {
	var b UpdateBlock
	if p := u.Unit.Placement; p != nil {
		up := p.Update
		b = UpdateBlock{MaxParallel: up.MaxParallel, AutoPromote: up.AutoPromote, AutoRevert: up.AutoRevert,
			MinHealthyTime: up.MinHealthyTime, HealthyDeadline: up.HealthyDeadline, ProgressDeadline: up.ProgressDeadline}
	}
	if b.MaxParallel <= 0 {
		b.MaxParallel = max(count(u), 1)
	}
	return b
}

// RecordsOutcome is what became of spec version sv ("<name>/<n>") in the
// records of its units (the step machine's judges move them): failed if
// any unit's failed (or was reverted), cancelled if any was superseded,
// running while any runs, successful when all are; with the first
// reason. ok false when a unit has no record that this deploy wrote (a
// deploy by an older mariposa): the deployment's state says it then.
func RecordsOutcome(sv string, units []string, recs map[string]*UnitRecord) (status, reason string, ok bool) {
	_, n, err := ParseSpecVersion(sv)
	if err != nil {
		return "", "", false
	}
	failed, cancelled, running := "", "", false
	for _, u := range units {
		r := recs[u]
		if r == nil {
			return "", "", false
		}
		st, why := r.Status, r.Reason
		switch {
		case r.Spec != sv:
			_, m, err := ParseSpecVersion(r.Spec)
			if err != nil || m < n {
				return "", "", false
			}
			st, why = DeployCancelled, "superseded by "+r.Spec
		case r.RevertOf != 0:
			st = DeployFailed
			if r.Ended != nil {
				why = r.Ended.Reason
			}
			why = fmt.Sprintf("%s: %s (reverted to %s)", u, why, r.Version)
		case st == DeployFailed:
			why = u + ": " + why
		}
		switch st {
		case DeployFailed:
			if failed == "" {
				failed = why
			}
		case DeployCancelled:
			if cancelled == "" {
				cancelled = why
			}
		case DeployRunning:
			running = true
		}
	}
	switch {
	case failed != "":
		return DeployFailed, failed, true
	case cancelled != "":
		return DeployCancelled, cancelled, true
	case running:
		return DeployRunning, "", true
	}
	return DeploySuccessful, "", true
}

// Effective is spec's deployment state st as the fleet moved it: st
// itself once terminal (a later deploy cancelled it; older versions
// also moved it to successful or failed), else the outcome
// of the records (the step machine moves them, and never the state) when
// it is terminal.
func Effective(st DeployState, spec *Spec, recs map[string]*UnitRecord) DeployState {
	if Terminal(st.Status) || spec == nil {
		return st
	}
	var units []string
	promoted, canaries := true, false
	for _, u := range spec.Units() {
		units = append(units, u.Unit.Name)
		if r := recs[u.Unit.Name]; r != nil && r.Spec == SpecVersion(spec.Name, spec.N) && r.Canaries > 0 {
			canaries = true
			promoted = promoted && r.Promoted
		}
	}
	status, reason, ok := RecordsOutcome(SpecVersion(spec.Name, spec.N), units, recs)
	if !ok {
		return st
	}
	if canaries && promoted {
		st.Promoted = true
	}
	if Terminal(status) {
		st.Status, st.Reason = status, reason
	}
	return st
}

// ReadUnitAt reads a version's unit definition with one read: the
// version's spec key (immutable, so a caller may keep the answer), then
// UnitOf.
func ReadUnitAt(client *api.Client, version, unit string) (UnitSpec, error) {
	key, err := VersionSpecKey(version)
	if err != nil {
		return UnitSpec{}, err
	}
	p, _, err := client.KV().Get(key, nil)
	if err != nil {
		return UnitSpec{}, fmt.Errorf("read %s: %w", key, err)
	}
	var v []byte
	if p != nil {
		v = p.Value
	}
	return UnitOf(version, v, unit)
}
