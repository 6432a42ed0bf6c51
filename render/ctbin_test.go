package render

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ctversion "github.com/hashicorp/consul-template/version"
)

// consulTemplateVersion is the consul-template release linked into mariposa
// (go.mod's), the one the cross-check runs as a program and the benchmarks
// measure beside mariposa.
const consulTemplateVersion = "v" + ctversion.Version + ctversion.VersionPrerelease

// consulTemplateEnv names the variable that points at a consul-template
// binary; the GNUmakefile's test and bench targets set it.
const consulTemplateEnv = "MARIPOSA_CONSUL_TEMPLATE_BIN"

// consulTemplateCache is where tools/consul-template/build.sh caches the
// build of consulTemplateVersion.
func consulTemplateCache() string {
	cache := os.Getenv("MARIPOSA_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "mariposa")
	}
	v := strings.TrimPrefix(consulTemplateVersion, "v")
	return filepath.Join(cache, fmt.Sprintf("consul-template-%s-%s-%s", v, runtime.GOOS, runtime.GOARCH), "consul-template")
}

// consulTemplateBinary returns the path of a consul-template binary of
// consulTemplateVersion: $MARIPOSA_CONSUL_TEMPLATE_BIN, else the cached
// build. With build, a missing one is built into the cache first (by
// tools/consul-template/build.sh, as `make consul-template` does).
func consulTemplateBinary(tb testing.TB, build bool) (string, error) {
	tb.Helper()
	bin := os.Getenv(consulTemplateEnv)
	switch {
	case bin != "":
	case build:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "tools", "consul-template", "build.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("tools/consul-template/build.sh: %v", err)
		}
		bin = strings.TrimSpace(string(out))
	default:
		bin = consulTemplateCache()
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("consul-template %s not built (%v): run `make consul-template`, or set %s", consulTemplateVersion, err, consulTemplateEnv)
		}
	}
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -v: %v", bin, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if want := "consul-template " + consulTemplateVersion; first != want && !strings.HasPrefix(first, want+" ") {
		return "", fmt.Errorf("%s reports %q; mariposa links consul-template %s", bin, first, consulTemplateVersion)
	}
	return bin, nil
}
