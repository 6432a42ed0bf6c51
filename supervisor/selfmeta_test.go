package supervisor

import (
	"maps"
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

// Before Run, SetSelfMeta goes into the options (what Run registers),
// without touching the caller's map.
func TestSetSelfMetaBeforeRun(t *testing.T) {
	given := map[string]string{"fleet": "true"}
	r := New(&schema.Config{}, Options{SelfMeta: given})
	r.SetSelfMeta(map[string]string{"capacity_cpu": "2000"})
	r.SetSelfMeta(map[string]string{"capacity_cpu": "4000", "local_memory": "64"})
	want := map[string]string{"fleet": "true", "capacity_cpu": "4000", "local_memory": "64"}
	if !maps.Equal(r.opts.SelfMeta, want) {
		t.Errorf("self meta %v, want %v", r.opts.SelfMeta, want)
	}
	if len(given) != 1 {
		t.Errorf("the caller's map changed: %v", given)
	}
}
