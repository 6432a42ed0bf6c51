// Package consulbin finds the consul binary: for `mariposa run -dev` and for
// the test harness.
package consulbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Version is the Consul release mariposa is built and tested against. A test
// keeps it equal to the one pinned in tools/consul/go.mod.
const Version = "1.20.6"

// EnvBinary names the variable that points at a consul binary.
const EnvBinary = "MARIPOSA_CONSUL_BIN"

// CachePath is where `make consul` caches the pinned build.
func CachePath() string {
	cache := os.Getenv("MARIPOSA_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "mariposa")
	}
	return filepath.Join(cache, fmt.Sprintf("consul-%s-%s-%s", Version, runtime.GOOS, runtime.GOARCH), "consul")
}

// Find returns $MARIPOSA_CONSUL_BIN, else the cached pinned build, else
// `consul` on PATH (when usePath).
func Find(usePath bool) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %v (run `make consul` to build Consul v%s)", EnvBinary, p, err, Version)
		}
		return p, nil
	}
	p := CachePath()
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if usePath {
		if lp, err := exec.LookPath("consul"); err == nil {
			return lp, nil
		}
	}
	return "", fmt.Errorf("consul v%s not found at %s: run `make consul` to build it (about 6 minutes, once), or set %s", Version, p, EnvBinary)
}
