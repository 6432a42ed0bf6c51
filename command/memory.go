package command

import (
	"runtime"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/exepages"
)

// afterRegistration waits for the services to be registered (registered
// closes; stop closing first ends it), then tells systemd mariposa is ready
// and hands the memory of its start back to the system.
func afterRegistration(log hclog.Logger, registered, stop <-chan struct{}) {
	if !notifyReady(log, registered, stop) {
		return
	}
	releaseStartMemory()
	select {
	case <-time.After(settleDelay):
		releaseSettledMemory(log)
	case <-stop:
	}
}

// releaseStartMemory returns the start's memory: parsing the files,
// registering, forking and the first renders leave garbage behind and grow
// each service goroutine's stack. An idle supervisor allocates so little
// that its next collection comes from the runtime's two-minute timer, and
// the free pages go back slowly after that, so an idle mariposa kept its
// start's high-water mark for minutes: with 100 services 8 to 11 MB of
// anonymous memory, depending on when the start's last collection fell,
// where the steady state is about 8. One collection and one scavenge,
// once, a few milliseconds of CPU. A variable for the test.
var releaseStartMemory = debug.FreeOSMemory

// settleDelay is how long after the registration the node is taken to have
// settled: its services' first health answers, renders and check updates
// done, their goroutines parked.
var settleDelay = 15 * time.Second

// releaseSettledMemory, once the node has settled, shrinks the services'
// stacks and returns what that frees. At registration the services'
// goroutines are still busy with their first steps, and the runtime
// shrinks only a parked goroutine's stack, by half at each collection:
// with 1,000 services the stacks stayed at 16 KB each (20 MB) until the
// runtime's two-minute collections got round to them, and an idle node
// measured 67 to 80 MB of RSS depending on when it was read; after these
// collections, 48. Three collections, once: milliseconds of CPU.
//
// It then unmaps the binary's pages the start left resident (exepages):
// the init of every linked package, parsing and the first registrations
// touch most of the binary, an idle node a fraction of it. They stay in
// the page cache, and what runs next maps those it touches again without
// reading the disk. Once only: a page dropped again and again would cost
// a fault each time the path that needs it runs (a restart's, say).
var releaseSettledMemory = func(log hclog.Logger) {
	runtime.GC() // 16 KB -> 8 KB
	runtime.GC() // -> 4 KB
	debug.FreeOSMemory()
	kb, err := exepages.Drop()
	if err != nil {
		// Harmless: the pages stay mapped, as they were.
		log.Debug("the binary's pages could not be unmapped", "error", err)
	}
	log.Debug("released the start's memory", "binary_pages_unmapped_kb", kb)
}
