package volume

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEmpty: Empty removes what a volume directory holds, files and
// directories, keeps the directory itself, and refuses a slot whose names
// would leave the store.
func TestEmpty(t *testing.T) {
	s := &Store{Root: t.TempDir()}
	dir := s.Dir("db", 0, "data")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a", "sub/b", ".hidden"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Empty("db", 0, "data"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the directory itself is gone: %v", err)
	}
	if len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
	if err := s.Empty("../etc", 0, "data"); err == nil {
		t.Fatal("a unit name that leaves the store was not refused")
	}
}
