package consulbin

import (
	"os"
	"strings"
	"testing"
)

// The pinned version here must be the one tools/consul builds.
func TestVersionMatchesToolsModule(t *testing.T) {
	b, err := os.ReadFile("../../tools/consul/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/hashicorp/consul" {
			if f[1] != "v"+Version {
				t.Fatalf("tools/consul pins %s, consulbin.Version is %s", f[1], Version)
			}
			return
		}
	}
	t.Fatal("tools/consul/go.mod does not require github.com/hashicorp/consul")
}
