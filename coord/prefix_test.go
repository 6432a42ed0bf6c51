package coord_test

import (
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/coord"
)

// Reload tokens live beside the rollouts' (rollout/<unit>/<hash>/...,
// whose hashes are hex: never "reload").
func TestPrefixBesideRollouts(t *testing.T) {
	if coord.RolloutPrefix != cluster.RolloutPrefix {
		t.Fatalf("coord.RolloutPrefix %q, cluster.RolloutPrefix %q", coord.RolloutPrefix, cluster.RolloutPrefix)
	}
	if p := coord.Prefix("shop", "0123abcd"); p != "mariposa/rollout/shop/reload/0123abcd/tokens" || !strings.HasPrefix(p, cluster.RolloutPrefix) {
		t.Errorf("prefix %q", p)
	}
}
