package render

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestRenderStateIsPerExecution: a template is parsed once and executed on
// every change (third_party/consul-template's executeParsed), so what one
// execution leaves (its scratch, the data it used or missed) must not reach
// the next. Each step below fails if one of those is carried over.
func TestRenderStateIsPerExecution(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "sw", "a")
	put(t, c, "pick/a", "A1")
	put(t, c, "pick/b", "B1")
	dir := t.TempDir()
	// SetX keeps a value already there: with one scratch for every
	// execution the file would stay at the first value.
	svc := templateService(dir, "web", `{{ scratch.SetX "v" (key (print "pick/" (key "sw"))) }}{{ scratch.Get "v" }}`)
	dest := svc.Templates[0].Destination
	f := follow(m.Service(svc))
	f.until(t, "first render", func(s ServiceState) bool { return s.TemplatesReady })
	waitFile := func(want string) {
		t.Helper()
		if !consultest.WaitFor(10*time.Second, func() bool { return readFile(t, dest) == want }) {
			t.Fatalf("file %q; want %q", readFile(t, dest), want)
		}
	}
	waitFile("A1")

	put(t, c, "pick/a", "A2")
	waitFile("A2") // the scratch starts empty

	put(t, c, "sw", "b")
	waitFile("B1")
	// The data used is the last execution's: pick/a is no longer read.
	if !consultest.WaitFor(10*time.Second, func() bool { return m.Watching() == 2 }) {
		t.Fatalf("%d queries; want 2 (sw and pick/b)", m.Watching())
	}

	// Missing data holds the file back, and only while it is missing.
	put(t, c, "sw", "c")
	f.until(t, "the render that misses pick/c", func(ServiceState) bool { return m.Watching() == 2 && hasWatch(m, "pick/c") })
	put(t, c, "sw", "a")
	waitFile("A2")
}

// hasWatch reports whether m runs a query for the key k.
func hasWatch(m *Manager, k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.deps {
		if w.view.d.String() == "kv.block("+k+")" {
			return true
		}
	}
	return false
}
