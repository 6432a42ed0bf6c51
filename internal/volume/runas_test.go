package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRestoreRunAs: with the volume's user in the context, the restored
// directory and its files are that user's and the restore hook runs as it.
func TestRestoreRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	h := newHandoff(t, nil)
	live := h.new.Dir("u", 0, "data")
	// The user must reach the store: the test's temporary directories are
	// 0700 (a real store's parents are 0755).
	for d := filepath.Dir(live); strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := WithRunAs(context.Background(), &RunAs{Uid: 65534, Gid: 65534})
	hook := []string{"sh", "-c", "id -u > hook.uid"}
	if _, err := h.new.Restore(ctx, "u", 0, "data", source(h.srv, "u", 0, "data", h.meta), hook, []string{"PATH=" + os.Getenv("PATH")}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(live, "hook.uid")); strings.TrimSpace(string(b)) != "65534" {
		t.Errorf("the hook ran as uid %q", b)
	}
	n := 0
	err := filepath.Walk(live, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n++
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s: owner %d:%d, want 65534:65534", p, st.Uid, st.Gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("only %d entries restored", n)
	}
}
