package render

import (
	"sync"
	"testing"
)

// Options.Observe sees each render that had its data: those that wrote a
// changed file and those that failed, by service; a render that changed
// nothing is neither, and a wait for data is not a render.
func TestObserve(t *testing.T) {
	a, c := newAgent(t)
	var mu sync.Mutex
	changed, failed := map[string]int{}, map[string]int{}
	m := startManager(t, a.HTTPAddr(), Options{Observe: func(svc string, ch, f bool) {
		mu.Lock()
		defer mu.Unlock()
		if ch {
			changed[svc]++
		}
		if f {
			failed[svc]++
		}
	}})
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return changed["web"], failed["web"]
	}
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ with $d := key "obs/json" | parseJSON }}port={{ $d.port }}{{ end }}`)
	f := follow(m.Service(svc))
	f.until(t, "a wait for the key", func(s ServiceState) bool { return s.Waiting != "" })
	if ch, fl := counts(); ch != 0 || fl != 0 {
		t.Fatalf("a wait counted: %d changed, %d failed", ch, fl)
	}
	put(t, c, "obs/json", `{"port": 1}`)
	f.until(t, "render", func(s ServiceState) bool { return s.TemplatesReady })
	put(t, c, "obs/json", `{not json`)
	f.until(t, "the error", func(s ServiceState) bool { return len(s.Errors) > 0 })
	put(t, c, "obs/json", `{"port": 2}`)
	f.until(t, "recovery", func(s ServiceState) bool { return len(s.Errors) == 0 && len(f.events) == 1 })
	if ch, fl := counts(); ch != 2 || fl != 1 {
		t.Errorf("%d changed, %d failed; want 2 and 1", ch, fl)
	}
}
