package executor_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// tcpProxy is a node's way to its agent at the TCP level: Break closes
// every connection (what is on its way fails at once, as when the agent
// restarts) and refuses new ones until Mend.
type tcpProxy struct {
	addr    string
	mu      sync.Mutex
	broken  bool
	refused int
	// refusedLines: the request lines of the connections refused since
	// the break (read before the close).
	refusedLines []string
	conns        map[net.Conn]bool
	// open: the client's connections open now; most: the most at once.
	open, most int
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: l.Addr().String(), conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); p.Break() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.broken {
				p.refused++
				p.mu.Unlock()
				go func() {
					// The client writes its request once connected: note
					// which it was, then refuse it.
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					line, _ := bufio.NewReader(c).ReadString('\n')
					c.Close()
					p.mu.Lock()
					p.refusedLines = append(p.refusedLines, line)
					p.mu.Unlock()
				}()
				continue
			}
			p.mu.Unlock()
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = true, true
			p.open++
			p.most = max(p.most, p.open)
			p.mu.Unlock()
			var once sync.Once
			done := func() {
				once.Do(func() {
					c.Close()
					u.Close()
					p.mu.Lock()
					delete(p.conns, c)
					delete(p.conns, u)
					p.open--
					p.mu.Unlock()
				})
			}
			go func() { io.Copy(u, c); done() }()
			go func() { io.Copy(c, u); done() }()
		}
	}()
	return p
}

func (p *tcpProxy) Break() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broken, p.refused, p.refusedLines = true, 0, nil
	for c := range p.conns {
		c.Close()
	}
}

func (p *tcpProxy) Mend() {
	p.mu.Lock()
	p.broken = false
	p.mu.Unlock()
}

// openNow is the client's connections open now.
func (p *tcpProxy) openNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// mostOpen is the most connections the client had open at once.
func (p *tcpProxy) mostOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most
}

// refusedAny says whether a request refused since the break had sub in
// its request line.
func (p *tcpProxy) refusedAny(sub string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.refusedLines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func (p *tcpProxy) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// inputs records what one node's loop stepped its agent with.
type inputs struct {
	mu sync.Mutex
	in []any
}

func (r *inputs) add(in any) {
	r.mu.Lock()
	r.in = append(r.in, in)
	r.mu.Unlock()
}

// since: from input from on, whether a WatchResumed came and, after it,
// an answer of a unit's index; how many WatchResumed in all; how many
// inputs in all.
func (r *inputs) since(from int) (resumedThenAnswered bool, resumes, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := false
	for i, in := range r.in {
		switch in.(type) {
		case agent.WatchResumed:
			resumes++
			seen = seen || i >= from
		case agent.SlotsAnswer:
			resumedThenAnswered = resumedThenAnswered || (seen && i >= from)
		}
	}
	return resumedThenAnswered, resumes, len(r.in)
}

// A node whose connections to its agent break (every blocking query
// fails, as when the agent restarts) tells its agent, once its watches
// answer again, that their answers may follow skipped states
// (agent.WatchResumed), before the first answer of a unit's index that
// follows; a steady node never does. With the report off (the mutation),
// nothing is said.
func TestWatchResumedAfterBreak(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noResume bool
	}{{"resumed", false}, {"not reported (mutation)", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var rec inputs
			u := agent.Unit{Name: "api", Count: 2, MaxPerNode: 2}
			a := consultest.NewDev(t)
			f := &fleet{t: t, c: a.Client(t), rec: newRecorder(), units: []agent.Unit{u}, sessNode: map[string]string{}}
			n := &node{name: "node0", check: "mariposa-node0:mariposa"}
			f.setCheck(n, api.HealthPassing)
			px := newTCPProxy(t, a.HTTPAddr())
			cfg := api.DefaultNonPooledConfig()
			cfg.Address = px.addr
			c, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := &runner{rec: f.rec, node: n.name, healthyAfter: 200 * time.Millisecond}
			n.ex = executor.New(executor.Config{Client: c, Node: n.name, Checks: []string{n.check}, LockDelay: 3 * time.Second,
				Seed: 1, Instances: r, Control: true, Log: consultest.Logger(t, n.name),
				Faults: executor.Faults{Stepped: rec.add, NoResume: tc.noResume}})
			r.ex = n.ex
			f.nodes = append(f.nodes, n)
			n.ex.Start()
			n.ex.SetUnits(f.units)
			t.Cleanup(func() {
				px.Mend()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				n.ex.Stop(ctx)
			})
			f.waitSettled(30 * time.Second)
			if _, resumes, _ := rec.since(0); resumes != 0 {
				t.Fatalf("a steady node was told its watches resumed %d times", resumes)
			}
			_, _, from := rec.since(0)
			px.Break()
			// Every watch fails and asks again a second later: refused.
			// The unit's index among them: a paced watch between two
			// requests at the break (Mend soon after) would not break
			// at all, and its answer come before any resume.
			if !consultest.WaitFor(20*time.Second, func() bool { return px.refusals() >= 6 && px.refusedAny("/mariposa/held/") }) {
				t.Fatalf("the watches did not ask again after the break (%d refused, the index's among them: %v)", px.refusals(), px.refusedAny("/mariposa/held/"))
			}
			px.Mend()
			// The watches answer again (a WatchResumed is stepped; never,
			// in the mutation) before the change: an index answer that
			// came before every other watch had resumed would be the last.
			consultest.WaitFor(5*time.Second, func() bool { _, resumes, _ := rec.since(0); return resumes > 0 })
			// A change, so that the unit's index answers.
			f.setUnits(agent.Unit{Name: "api", Count: 1, MaxPerNode: 2})
			f.waitSettled(30 * time.Second)
			ok := consultest.WaitFor(10*time.Second, func() bool { ok, _, _ := rec.since(from); return ok })
			if ok == tc.noResume {
				_, resumes, _ := rec.since(0)
				t.Fatalf("resumed, then an answer of the index, after the break: %v (%d WatchResumed in all)", ok, resumes)
			}
		})
	}
}
