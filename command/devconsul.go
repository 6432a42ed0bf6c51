package command

import (
	"fmt"
	"net"
	"os"
	"strconv"
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

func startDevConsul(address string, log hclog.Logger) (*devConsul, error) {
	bin, err := consulbin.Find(true)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("consul address %q: %v", address, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("consul address %q: bad port", address)
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	dir, err := os.MkdirTemp("", "mariposa-dev-consul-")
	if err != nil {
		return nil, err
	}
	log = log.Named("dev-consul")
	args := []string{bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", host, "-http-port", port}
	sink := proc.NewSink(256, func(l proc.Line) { log.Debug(l.Text) }, nil)
	p, err := proc.Start(proc.Spec{Argv: args, Env: os.Environ(), Output: sink, Name: "consul", Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	d := &devConsul{p: p, dataDir: dir, log: log}
	cfg := api.DefaultConfig()
	cfg.Address = net.JoinHostPort(host, port)
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
			os.RemoveAll(dir)
			return nil, fmt.Errorf("consul dev agent exited: %s (is port %s taken?)", p.Exit(), port)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("consul dev agent not ready after 30s")
		}
	}
	log.Info("started a Consul dev agent", "address", cfg.Address, "pid", p.Pid, "binary", bin)
	return d, nil
}

func (d *devConsul) stop() {
	d.p.Stop(syscall.SIGTERM, 5*time.Second)
	os.RemoveAll(d.dataDir)
	d.log.Info("stopped the Consul dev agent")
}
