package command

import (
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
)

// afterRegistration waits for the services to be registered (registered
// closes; stop closing first ends it), then tells systemd mariposa is ready
// and hands the memory of its start back to the system.
func afterRegistration(log hclog.Logger, registered, stop <-chan struct{}) {
	if notifyReady(log, registered, stop) {
		releaseStartMemory()
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
