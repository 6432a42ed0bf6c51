package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Rolling updates (CLUSTER.md section 5, items 2-4) are the fleet's step
// machine's (fleet/agent: its rollout tokens, units/<unit>/tokens/, and
// its judge). What is left here is the layout and the pure rules it shares
// with the CLI: how a unit's instances run (runHash: a new version when it
// changes), the keys under rollout/ (an operator's manual health marks; the
// failure marks of older versions, which mariposa deploy clears), and
// whether a slot's instances are healthy (slotHealthy).

// RolloutPrefix is rollout/: an operator's manual health marks
// (ManualHealthKey). Older versions kept their rollout tokens and failure
// marks there too (rolloutFailedKey, cleared by a deploy).
const RolloutPrefix = Prefix + "rollout/"

// runHash identifies how a unit's instances run: its services without
// their placement.
func runHash(u UnitSpec) string {
	var svcs []schema.Service
	for _, s := range u.Services {
		c := *s
		c.Placement = nil
		svcs = append(svcs, c)
	}
	b, _ := json.Marshal(svcs)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// sameRun: a and b run their instances the same way.
func sameRun(a, b UnitSpec) bool { return runHash(a) == runHash(b) }

func rolloutFailedKey(unit, hash string) string { return RolloutPrefix + unit + "/" + hash + "/failed" }

// MaxCatalogLag is how long before the catalog first shows a slot passing
// min_healthy_time may have started counting: about five times the
// propagation measured under load (0.05-0.12 s at p50). min_healthy_time
// counts from when the checks passed where mariposa runs them, not from
// when the catalog showed it (a check's result reaches the catalog
// 0.1-0.2 s after mariposa has it), but a catalog further behind than this
// is not catching up, it is slow, and the count goes by it (fleet/agent's
// judge, and run -cluster's nextHealth).
const MaxCatalogLag = 500 * time.Millisecond

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ManualHealthKey is rollout/<unit>/<version>/healthy/<k>: an operator
// says slot k's instance is healthy at version (health_check = "manual").
func ManualHealthKey(unit, version string, k int) string {
	return fmt.Sprintf("%s%s/%s/healthy/%d", RolloutPrefix, unit, version, k)
}

// slotHealthy says whether every member of u runs in slot id and is
// healthy per health_check, with their PIDs, or why not. With
// health_check = "checks", local is since when every member's checks have
// passed in mariposa's own runs, when it runs every one of them (zero
// otherwise): a member's checks must then pass there as well as in the
// catalog.
func slotHealthy(snaps []supervisor.Snapshot, id string, u UnitSpec, mode string) (ok bool, pids []int, local time.Time, why string) {
	allLocal := mode == schema.UpdateChecks
	for _, svc := range u.Services {
		var sn *supervisor.Snapshot
		for i := range snaps {
			if snaps[i].Slot == id && snaps[i].Service == svc.Name {
				sn = &snaps[i]
			}
		}
		switch {
		case sn == nil:
			return false, nil, time.Time{}, svc.Name + " not started"
		case sn.State != supervisor.StateRunning:
			return false, nil, time.Time{}, fmt.Sprintf("%s %s", svc.Name, sn.State)
		case mode == schema.UpdateChecks && !sn.ChecksPassing:
			return false, nil, time.Time{}, svc.Name + "'s checks not passing"
		case mode == schema.UpdateChecks && sn.LocalChecks && sn.LocalPassingSince.IsZero():
			return false, nil, time.Time{}, svc.Name + "'s checks not passing where mariposa runs them"
		}
		pids = append(pids, sn.PID)
		if allLocal = allLocal && sn.LocalChecks; allLocal {
			local = later(local, sn.LocalPassingSince)
		}
	}
	if !allLocal {
		local = time.Time{}
	}
	return true, pids, local, ""
}
