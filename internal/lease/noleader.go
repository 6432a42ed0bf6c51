package lease

import "github.com/mariposa-sh/mariposa/internal/holdrule"

// NoLeaderAnswer classifies an error of a confirmation read as the lease
// does (noLeaderAnswer): holdrule.NoLeader when the local agent answered,
// relaying a server that could not reach a Raft leader; Unproven
// otherwise. The fleet's executor (fleet/executor) uses it for its own
// confirmations.
func NoLeaderAnswer(err error) holdrule.Kind { return noLeaderAnswer(err) }
