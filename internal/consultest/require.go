package consultest

import (
	"os"
	"testing"
)

// Require skips the test when a prerequisite is missing on a developer's
// machine, and fails it in CI (CI=true): a test skipped in CI is a test that
// does not exist.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing in CI: %s", why)
	}
	t.Skip(why)
}

// SkipShort skips a long test under -short on a developer's machine; in CI
// (CI=true) the test always runs, -short or not.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip(why)
	}
}
