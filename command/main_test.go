package command

import (
	"fmt"
	"os"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/cgroup"
)

// TestMain keeps the control groups of this package's mariposas apart from
// those of other test binaries running at once (same service IDs), and
// removes them at the end.
func TestMain(m *testing.M) {
	parent := fmt.Sprintf("mariposa-command-test-%d", os.Getpid())
	os.Setenv("MARIPOSA_CGROUP_PARENT", parent)
	code := m.Run()
	if cg, err := cgroup.Open(parent); err == nil {
		_ = cg.Remove()
	}
	os.Exit(code)
}
