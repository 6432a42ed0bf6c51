package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// UpdateBlock is a unit's update block as its deployment record carries it
// (schema.Update's rollout part).
type UpdateBlock struct {
	MaxParallel     int           `json:"max_parallel"`
	AutoPromote     bool          `json:"auto_promote,omitempty"`
	AutoRevert      bool          `json:"auto_revert,omitempty"`
	MinHealthyTime  time.Duration `json:"min_healthy_time"`
	HealthyDeadline time.Duration `json:"healthy_deadline"`
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
	Started  time.Time   `json:"started"`
	Reason   string      `json:"reason,omitempty"`
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
