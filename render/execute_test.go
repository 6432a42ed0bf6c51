package render

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestRenderStateIsPerExecution: a template is executed again on every
// change of its data, and what one execution leaves (its scratch, the data
// it used or missed) must not reach the next: the data followed, and what a
// later render is skipped for, is the last execution's. Each step below
// fails if one of those is carried over.
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

// TestRenderSkipsUnchangedData: a template is executed again only when data
// it read has changed since its last render. A wake-up with nothing new for
// it (here sent directly, as a delivery for a query it stopped reading
// would) costs no execution; a change of what it reads does.
func TestRenderSkipsUnchangedData(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "sw", "a")
	put(t, c, "pick/a", "A1")
	put(t, c, "other", "x")
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ key (print "pick/" (key "sw")) }}`, `{{ key "other" }}`)
	sd := m.Service(svc)
	f := follow(sd)
	f.until(t, "first render", func(s ServiceState) bool { return s.TemplatesReady })
	waitFile := func(i int, want string) {
		t.Helper()
		dest := svc.Templates[i].Destination
		if !consultest.WaitFor(10*time.Second, func() bool { return readFile(t, dest) == want }) {
			t.Fatalf("%s holds %q; want %q", dest, readFile(t, dest), want)
		}
	}
	waitFile(0, "A1")
	r := sd.templates[0]
	before := execs(sd, 0)

	for range 3 {
		r.dataChanged()
		// Taken by the render loop: the next wake-up is one more, not
		// merged with this one.
		if !consultest.WaitFor(10*time.Second, func() bool { return len(r.kick) == 0 }) {
			t.Fatal("the render loop never took the wake-up")
		}
	}
	// Data only the other template reads.
	put(t, c, "other", "y")
	waitFile(1, "y")
	// Data the first one reads: one execution, for this change only.
	put(t, c, "pick/a", "A2")
	waitFile(0, "A2")
	if n := execs(sd, 0) - before; n != 1 {
		t.Fatalf("%d executions for one change of the data read and three wake-ups with none; want 1", n)
	}
	m.Remove(svc)
}

// execs counts the executions of a template.
func execs(sd *ServiceData, i int) int {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return sd.templates[i].execs
}
