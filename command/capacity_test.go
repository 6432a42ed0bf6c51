package command

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

func TestMemTotal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(p, []byte("MemFree:  100 kB\nMemTotal:       16384000 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mb, err := memTotal(p); err != nil || mb != 16000 {
		t.Errorf("memTotal: %d, %v", mb, err)
	}
	if err := os.WriteFile(p, []byte("MemFree:  100 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := memTotal(p); err == nil {
		t.Error("no MemTotal: no error")
	}
}

func TestNodeCapacity(t *testing.T) {
	t.Setenv(capacityEnv, "cpu=2000,memory=1024")
	cfg := &schema.Config{Services: []*schema.Service{{Name: "a", Resources: &schema.Resources{Memory: 100}}}}
	c, err := nodeCapacity(placement.Reservation{CPU: 500}, cfg)
	want := placement.Capacity{Total: placement.Reservation{CPU: 2000, Memory: 1024}, Reserve: placement.Reservation{CPU: 500}, Local: placement.Reservation{Memory: 100}}
	if err != nil || c != want {
		t.Errorf("got %+v, %v", c, err)
	}
	if _, err := nodeCapacity(placement.Reservation{Memory: 2048}, nil); err == nil {
		t.Error("a reserve above the host: no error")
	}
	t.Setenv(capacityEnv, "memory=lots")
	if _, err := nodeCapacity(placement.Reservation{}, nil); err == nil {
		t.Error("a bad $MARIPOSA_CAPACITY: no error")
	}
	t.Setenv(capacityEnv, "")
	if c, err := nodeCapacity(placement.Reservation{}, nil); err != nil || c.Total.CPU < 1000 || c.Total.Memory < 1 {
		t.Errorf("detected: %+v, %v", c, err)
	}
}
