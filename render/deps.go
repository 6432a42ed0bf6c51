package render

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	dep "github.com/hashicorp/consul-template/dependency"

	"github.com/mariposa-sh/mariposa/schema"
)

// DepState is the current state of one depends_on block.
type DepState struct {
	Dep *schema.Dependency
	// Known is false until Consul first answered.
	Known bool
	// Registered counts instances of the service (with the tag) in the
	// catalog, any health; Passing those whose every check passes. When the
	// dependency asks only for passing instances, Registered is not queried
	// and equals Passing.
	Registered, Passing int
	Satisfied           bool
	// Waiting says what is missing ("waiting: db needs 2 passing mysql
	// (tag primary), has 1"); "" when satisfied.
	Waiting string
	// Addrs are host:port of the matching instances (the passing ones when
	// the dependency asks for passing instances), sorted by node then ID.
	Addrs []string
}

// gate follows one dependency through a shared health query.
type gate struct {
	sd    *ServiceData
	dep   *schema.Dependency
	query dep.Dependency
	// anyHealth: the query returns every instance and passing ones are
	// counted here; otherwise Consul filters passing ones (and the query is
	// the very one a template's `service "tag.name"` runs, so it is shared).
	anyHealth bool
	state     DepState // guarded by sd.mu
}

func newGate(sd *ServiceData, d *schema.Dependency) (*gate, error) {
	name := d.Service
	if name == "" {
		name = d.Name
	}
	if d.Tag != "" {
		name = d.Tag + "." + name
	}
	g := &gate{sd: sd, dep: d, anyHealth: d.Registered > 0}
	if g.anyHealth {
		name += "|any"
	}
	q, err := dep.NewHealthServiceQuery(name)
	if err != nil {
		return nil, fmt.Errorf("depends_on %q: %w", d.Name, err)
	}
	g.query = q
	g.state = g.compute(nil, false)
	return g, nil
}

// dataChanged runs on the manager's dispatch goroutine: cheap and inline, so
// a dependent can start within one blocking-query round trip.
func (g *gate) dataChanged() {
	data, ok := g.sd.m.recall(g.query)
	var list []*dep.HealthService
	if ok {
		list, _ = data.([]*dep.HealthService)
	}
	st := g.compute(list, ok)
	g.sd.mu.Lock()
	same := sameDepState(g.state, st)
	g.state = st
	g.sd.mu.Unlock()
	if !same {
		g.sd.notify()
	}
}

func (g *gate) compute(list []*dep.HealthService, known bool) DepState {
	d := g.dep
	st := DepState{Dep: d, Known: known}
	var passing []*dep.HealthService
	for _, s := range list {
		if !g.anyHealth || s.Status == dep.HealthPassing {
			passing = append(passing, s)
		}
	}
	st.Registered, st.Passing = len(list), len(passing)
	use := list
	if d.Passing > 0 {
		use = passing
	}
	for _, s := range use {
		st.Addrs = append(st.Addrs, net.JoinHostPort(s.Address, strconv.Itoa(s.Port)))
	}
	switch {
	case d.Registered > 0 && st.Registered < d.Registered:
		st.Waiting = g.message(d.Registered, "registered", st.Registered)
	case d.Passing > 0 && st.Passing < d.Passing:
		st.Waiting = g.message(d.Passing, "passing", st.Passing)
	default:
		st.Satisfied = true
	}
	return st
}

func (g *gate) message(want int, kind string, have int) string {
	d := g.dep
	svc := d.Service
	if svc == "" {
		svc = d.Name
	}
	tag := ""
	if d.Tag != "" {
		tag = " (tag " + d.Tag + ")"
	}
	return fmt.Sprintf("waiting: %s needs %d %s %s%s, has %d", d.Name, want, kind, svc, tag, have)
}

// env is <PREFIX>_ADDR, _ADDRS, _HOST and _PORT (empty values while no
// instance matches).
func (g *gate) env(st DepState) []string {
	p := g.dep.EnvPrefix
	if p == "" {
		p = envPrefix(g.dep.Name)
	}
	var addr, host, port string
	if len(st.Addrs) > 0 {
		addr = st.Addrs[0]
		host, port, _ = net.SplitHostPort(addr)
	}
	return []string{
		p + "_ADDR=" + addr,
		p + "_ADDRS=" + strings.Join(st.Addrs, ","),
		p + "_HOST=" + host,
		p + "_PORT=" + port,
	}
}

// envPrefix mirrors the schema's default: the label upper-cased with every
// other character as "_".
func envPrefix(label string) string {
	b := []byte(strings.ToUpper(label))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

func sameDepState(a, b DepState) bool {
	if a.Known != b.Known || a.Registered != b.Registered || a.Passing != b.Passing ||
		a.Satisfied != b.Satisfied || a.Waiting != b.Waiting || len(a.Addrs) != len(b.Addrs) {
		return false
	}
	for i := range a.Addrs {
		if a.Addrs[i] != b.Addrs[i] {
			return false
		}
	}
	return true
}
