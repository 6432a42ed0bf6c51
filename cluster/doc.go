// Package cluster is the fleet's KV layout with its codecs, and the CLI's
// reads and writes of that layout. It runs nothing: no goroutine is
// started here. Placement, pure, is fleet/placement below it (cluster
// imports it: its codecs carry placement's NodeInfo and RescheduleEvent,
// and its reads build placement's View); the fleet itself, what
// `mariposa run -cluster` runs, is the step machine in fleet/agent (pure)
// under fleet/executor (its I/O), above both.
//
//   - The KV layout and its codecs, pure: keys.go, slotvalue.go, spec.go,
//     version.go, unitrecord.go, deployment.go, audit.go, pause.go,
//     drain.go, storm.go, volumes.go, parse.go (the answers of the watches:
//     slots, nodes, penalties, control/), placeview.go (placement's View
//     of one unit from the slot keys as read, for status and why), and the
//     rules the step machine shares with the CLI (stepexport.go,
//     engineexport.go, placeexport.go, volexport.go). Several of these
//     files also hold the writes of their keys, next to the codec:
//   - I/O that callers run on their own goroutines: the CLI's Consul reads
//     and writes (Deploy, Promote, Watch for deploy -wait, ReadState for
//     status and why, Pause and ResumeAll, StartDrain, ResetSlot,
//     MarkHealthy, StopDeployment, PruneAudit, FitSpec in fitspec.go for
//     mariposa plan and deploy, ...), FollowPauses (a node without
//     -cluster follows the fleet's pauses: a blocking loop until its
//     context ends), and the volume transfers fleet/executor calls
//     (volshare.go) and the node API's check of them (AuthorizeVolume).
//
// How the slots of a unit are placed (rank-ordered claims, reschedule
// delays) is told in fleet/placement's package comment.
package cluster
