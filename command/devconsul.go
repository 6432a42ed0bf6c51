package command

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consulbin"
	"github.com/mariposa-sh/mariposa/internal/proc"
)

// devConsul is the Consul dev agent that `run -dev` starts when no agent
// answers.
type devConsul struct {
	p       *proc.Process
	dataDir string
	log     hclog.Logger
}

// devPorts are the ports mariposa asks the dev agent for. All are given on
// its command line, so that when one is taken the error can list them.
type devPorts struct {
	HTTP, DNS, Server, SerfLAN, SerfWAN, GRPC, GRPCTLS int
}

// defaultDevPorts are Consul's own defaults, with the HTTP port of the
// address mariposa was told to use.
func defaultDevPorts(http int) devPorts {
	return devPorts{HTTP: http, DNS: 8600, Server: 8300, SerfLAN: 8301, SerfWAN: 8302, GRPC: 8502, GRPCTLS: 8503}
}

func (p devPorts) args() []string {
	return []string{"-http-port", strconv.Itoa(p.HTTP), "-dns-port", strconv.Itoa(p.DNS),
		"-server-port", strconv.Itoa(p.Server), "-serf-lan-port", strconv.Itoa(p.SerfLAN),
		"-serf-wan-port", strconv.Itoa(p.SerfWAN), "-grpc-port", strconv.Itoa(p.GRPC),
		"-grpc-tls-port", strconv.Itoa(p.GRPCTLS)}
}

func (p devPorts) String() string {
	return fmt.Sprintf("http %d, dns %d, server %d, serf-lan %d, serf-wan %d, grpc %d, grpc-tls %d",
		p.HTTP, p.DNS, p.Server, p.SerfLAN, p.SerfWAN, p.GRPC, p.GRPCTLS)
}

func startDevConsul(address string, log hclog.Logger) (*devConsul, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("consul address %q: %v", address, err)
	}
	http, err := strconv.Atoi(port)
	if err != nil || http <= 0 || http > 65535 {
		return nil, fmt.Errorf("consul address %q: bad port", address)
	}
	return startDevConsulPorts(host, defaultDevPorts(http), log)
}

func startDevConsulPorts(host string, ports devPorts, log hclog.Logger) (*devConsul, error) {
	bin, err := consulbin.Find(true)
	if err != nil {
		return nil, err
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	dir, err := os.MkdirTemp("", "mariposa-dev-consul-")
	if err != nil {
		return nil, err
	}
	log = log.Named("dev-consul")
	args := append([]string{bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", host}, ports.args()...)
	tail := &lineTail{max: 64}
	sink := proc.NewSink(256, func(l proc.Line) { tail.add(l); log.Debug(l.Text) }, nil)
	p, err := proc.Start(proc.Spec{Argv: args, Env: os.Environ(), Output: sink, Name: "consul", Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	d := &devConsul{p: p, dataDir: dir, log: log}
	// failed says what the agent said and what it was asked for: a taken
	// port is the usual cause, and the agent names the one it could not bind.
	failed := func(what string) error {
		msg := what
		if said := tail.errors(); len(said) > 0 {
			msg += "; it said:\n  " + strings.Join(said, "\n  ") + "\n"
		} else {
			msg += "\n"
		}
		where := "on 127.0.0.1"
		if host != "127.0.0.1" {
			where = "(http and dns on " + host + ", the rest on 127.0.0.1)"
		}
		return fmt.Errorf("%smariposa asked it for the ports %s %s", msg, ports, where)
	}
	cfg := api.DefaultConfig()
	cfg.Address = net.JoinHostPort(host, strconv.Itoa(ports.HTTP))
	c, _ := api.NewClient(cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if leader, err := c.Status().Leader(); err == nil && leader != "" {
			if name, err := c.Agent().NodeName(); err == nil {
				if n, _, err := c.Catalog().Node(name, nil); err == nil && n != nil {
					break
				}
			}
		}
		select {
		case <-p.Done():
			select { // every line it wrote reaches the tail
			case <-p.OutputDone():
			case <-time.After(2 * time.Second):
			}
			sink.Close()
			os.RemoveAll(dir)
			return nil, failed(fmt.Sprintf("the Consul dev agent (%s) exited (%s)", bin, p.Exit()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			sink.Close()
			return nil, failed(fmt.Sprintf("the Consul dev agent (%s) was not ready after 30s", bin))
		}
	}
	log.Info("started a Consul dev agent", "address", cfg.Address, "pid", p.Pid, "binary", bin, "ports", ports.String())
	return d, nil
}

func (d *devConsul) stop() {
	d.p.Stop(syscall.SIGTERM, 5*time.Second)
	os.RemoveAll(d.dataDir)
	d.log.Info("stopped the Consul dev agent")
}

// lineTail keeps the last lines of the dev agent's output.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []proc.Line
}

func (t *lineTail) add(l proc.Line) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// logStamp is the timestamp Consul's log lines start with.
var logStamp = regexp.MustCompile(`^\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d{4}) `)

// errors are the lines that say why the agent failed: whatever it wrote
// on stderr and its [ERROR] log lines (Consul logs to stdout), else its last
// few lines.
func (t *lineTail) errors() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, l := range t.lines {
		if l.Stream == "stderr" || strings.Contains(l.Text, "[ERROR]") {
			out = append(out, logStamp.ReplaceAllString(strings.TrimSpace(l.Text), ""))
		}
	}
	if len(out) == 0 {
		for _, l := range t.lines[max(0, len(t.lines)-5):] {
			if s := strings.TrimSpace(l.Text); s != "" {
				out = append(out, logStamp.ReplaceAllString(s, ""))
			}
		}
	}
	return out
}
