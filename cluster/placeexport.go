package cluster

import (
	"time"

	"github.com/hashicorp/consul/api"
)

// ParsePenalties reads the pairs under PenaltyPrefix: per unit, per node,
// the end of its reschedule penalty (what the fleet agent's executor
// watches, as Fleet does).
func ParsePenalties(pairs api.KVPairs) map[string]map[string]time.Time {
	return parsePenalties(pairs)
}
