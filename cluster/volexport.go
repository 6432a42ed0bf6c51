package cluster

// The pure rule of volumes.go, exported for the fleet's step machine
// (fleet/agent decides when a slot restores and hands off; its executor
// and the simulator decide which copy a new holder starts from, here).

// DataChoice is where a new holder's data comes from.
type DataChoice = dataChoice

// The choices (ChooseData).
const (
	DataEmpty     = dataEmpty     // the slot's first holder: empty volumes
	DataKeep      = dataKeep      // this node's copy is the newest
	DataRestore   = dataRestore   // fetch the planned handoff
	DataUnplanned = dataUnplanned // the newest data was lost with a node: on_missing
)

// DataCandidates is what a new holder knows when it decides: its own
// term's LockIndex, the slot's previous holder ("" none), the last
// handoff (nil none) and the generation of its own copy (0 none).
type DataCandidates = dataCandidates

// ChooseData decides where a new holder's data comes from, and says why
// (by generation, never by who handed off last).
func ChooseData(c DataCandidates) (DataChoice, string) { return chooseData(c) }
