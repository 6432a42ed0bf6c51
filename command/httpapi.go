package command

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/metrics"
	"github.com/mariposa-sh/mariposa/nodeapi"
	"github.com/mariposa-sh/mariposa/supervisor"
)

const httpAPIFlagsHelp = `  -http-addr=ADDR    The node's HTTP API: /v1/status, /v1/events (?follow=1
                     streams), /v1/logs/SERVICE, POST /v1/restart/SERVICE
                     and /v1/reset/SERVICE, and Prometheus metrics at
                     /metrics (default ` + nodeapi.DefaultAddr + `: loopback only;
                     0.0.0.0:8585 for every interface; "" or "off" turns it
                     off). Registered with mariposa's own service "mariposa"
                     (its port, meta http_api), for tools and Prometheus'
                     consul_sd. With Consul ACLs on, requests need a token
                     (X-Consul-Token or Authorization: Bearer) with the
                     permission Consul would ask: node:read (status,
                     events), service:read (logs), service:write (restart,
                     reset), agent:read (metrics). Without ACLs, anyone
                     who reaches a non-loopback address reads the logs
                     and restarts or resets services with no token:
                     mariposa warns (log, liveness check, /v1/status).`

// nodeAPI is run's HTTP API and Prometheus metrics: the metrics count
// from the first Consul request on, the API serves once the runner exists.
type nodeAPI struct {
	addr    string // as asked; "" when off
	addrSet bool   // -http-addr was given
	metrics *metrics.Metrics
	events  *nodeapi.EventLog
	runner  atomic.Pointer[supervisor.Runner]
	srv     *nodeapi.Server
	// volumes, when set, is served at /v1/volumes/ to the holders of the
	// slots (client checks that they hold them).
	volumes *volume.Store
	client  *api.Client
	// authClient asks Consul about the API's callers' tokens: the Consul
	// client's transport, not counted in the metrics (an "ACL support
	// disabled" answer is no failure).
	authClient *http.Client
	checker    nodeapi.Checker
	// warn is the warning about an API open to the network without ACLs
	// ("" or nil: none), for the log, /v1/status and the liveness check.
	warn   atomic.Pointer[string]
	cancel context.CancelFunc
}

func (n *nodeAPI) register(fs *flag.FlagSet) {
	n.addr = nodeapi.DefaultAddr
	fs.Func("http-addr", "", func(s string) error { n.addr, n.addrSet = s, true; return nil })
}

// setup makes the metrics, reading the runner's snapshots and fl's fleet
// at scrape time, and instruments client's transport (ccfg is the config
// api.NewClient was given: it holds the client's http.Client).
func (n *nodeAPI) setup(ccfg *api.Config, fl *fleetMember) {
	if strings.EqualFold(n.addr, "off") {
		n.addr = ""
	}
	n.events = nodeapi.NewEventLog(nodeapi.DefaultEvents)
	n.metrics = metrics.New(metrics.Sources{
		Snapshots: func() []supervisor.Snapshot {
			if r := n.runner.Load(); r != nil {
				return r.Snapshots()
			}
			return nil
		},
		Fleet: fl.stats,
	})
	n.authClient = http.DefaultClient
	if hc := ccfg.HttpClient; hc != nil {
		n.authClient = &http.Client{Transport: hc.Transport}
		hc.Transport = n.metrics.Transport(hc.Transport)
	}
}

// event takes every supervisor event: the metrics and the API's events.
func (n *nodeAPI) event(e supervisor.Event) {
	n.metrics.Event(e)
	n.events.Add(e)
}

// listen binds the API (when on), before the runner starts, so that
// mariposa's own registration carries the address it got.
func (n *nodeAPI) listen(ccfg *api.Config, rings *logring.Set, log hclog.Logger) error {
	if n.addr == "" {
		log.Info("HTTP API off")
		return nil
	}
	n.checker = &nodeapi.ConsulChecker{BaseURL: consulBaseURL(ccfg), Client: n.authClient}
	srv, err := nodeapi.Listen(nodeapi.Config{
		Addr: n.addr,
		Node: func() string {
			if r := n.runner.Load(); r != nil {
				return r.Node()
			}
			return ""
		},
		Snapshots: func() []supervisor.Snapshot {
			if r := n.runner.Load(); r != nil {
				return r.Snapshots()
			}
			return nil
		},
		Events:   n.events,
		Target:   lazyTarget{n},
		Logs:     rings,
		Metrics:  n.metrics.Handler(),
		Volumes:  n.volumeHandler(),
		Auth:     nodeapi.NewAuthorizer(n.checker, 0, 0),
		Warnings: n.warnings,
		Log:      log,
	})
	if err != nil {
		if !n.addrSet {
			// The default address is taken (another mariposa on this
			// machine, with -allow-second-supervisor, or in tests): run
			// without the API rather than not at all.
			log.Warn("HTTP API off: its default address is taken; give -http-addr another", "error", err)
			return nil
		}
		return err
	}
	n.srv = srv
	return nil
}

// boundAddr is the API's address with the port it got ("" when off).
func (n *nodeAPI) boundAddr() string {
	if n.srv == nil {
		return ""
	}
	return n.srv.Addr()
}

// start serves with r, and watches whether the API is open to anyone
// (watchOpen).
func (n *nodeAPI) start(r *supervisor.Runner, log hclog.Logger) {
	n.runner.Store(r)
	if n.srv != nil {
		go func() { _ = n.srv.Serve() }()
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		go n.watchOpen(ctx, n.srv.Addr(), log)
	}
}

func (n *nodeAPI) close() {
	if n.cancel != nil {
		n.cancel()
	}
	if n.srv != nil {
		n.srv.Close()
	}
}

// openCheckEvery is how often mariposa asks Consul again whether its ACLs
// are on, for the warning about an open API; openRetry, until it answers.
const (
	openCheckEvery = time.Minute
	openRetry      = 2 * time.Second
)

// watchOpen warns, as long as it holds, that the API bound to addr is open
// to the network while Consul enforces no ACLs: in the log (when it
// starts and ends), GET /v1/status's warnings and the liveness check's
// output. A loopback address needs no watch.
func (n *nodeAPI) watchOpen(ctx context.Context, addr string, log hclog.Logger) {
	if !exposedAddr(addr) {
		return
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		on, err := n.checker.ACLEnabled(cctx)
		cancel()
		next := openCheckEvery
		if err != nil {
			next = openRetry // Consul not answering yet
		} else {
			w := openWarning(addr, on)
			prev := n.warn.Swap(&w)
			switch {
			case w != "" && (prev == nil || *prev == ""):
				log.Warn(w)
			case w == "" && prev != nil && *prev != "":
				log.Info("the HTTP API needs Consul tokens again: Consul enforces ACLs", "address", addr)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// warning is the open API's warning, "" when there is none.
func (n *nodeAPI) warning() string {
	if w := n.warn.Load(); w != nil {
		return *w
	}
	return ""
}

func (n *nodeAPI) warnings() []string {
	if w := n.warning(); w != "" {
		return []string{w}
	}
	return nil
}

// exposedAddr says whether a listener bound to addr (host:port) can be
// reached from other machines: any address but a loopback one
// (127.0.0.0/8, ::1).
func exposedAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// openWarning is the warning for the API bound to addr when Consul's ACLs
// are on (aclOn) or off: "" when the API is on loopback or asks for
// tokens.
func openWarning(addr string, aclOn bool) string {
	if aclOn || !exposedAddr(addr) {
		return ""
	}
	return fmt.Sprintf("the HTTP API at %s is open to the network and Consul enforces no ACLs: anyone who can reach "+
		"this address can read this node's status, events and service logs, and restart or reset its services, "+
		"without a token (bind -http-addr to loopback or a private address behind a firewall, or turn Consul's ACLs on)", addr)
}

// lazyTarget is the control target of the runner, once there is one.
type lazyTarget struct{ n *nodeAPI }

func (t lazyTarget) target() (controlTarget, error) {
	r := t.n.runner.Load()
	if r == nil {
		return controlTarget{}, fmt.Errorf("mariposa is starting")
	}
	return controlTarget{r}, nil
}

func (t lazyTarget) Restart(s, by string) error {
	ct, err := t.target()
	if err != nil {
		return err
	}
	return ct.Restart(s, by)
}

func (t lazyTarget) ResetFailed(s, by string) error {
	ct, err := t.target()
	if err != nil {
		return err
	}
	return ct.ResetFailed(s, by)
}

func (t lazyTarget) Services() []string {
	if r := t.n.runner.Load(); r != nil {
		return r.Services()
	}
	return nil
}

// consulBaseURL is the agent's HTTP API as ccfg names it once api.NewClient
// has read it (a UNIX socket's client dials the socket whatever the host).
func consulBaseURL(ccfg *api.Config) string {
	if strings.HasPrefix(ccfg.Address, "/") {
		return "http://consul"
	}
	scheme := ccfg.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + ccfg.Address + ccfg.PathPrefix
}

// volumeHandler serves the volume store to the slots' holders; nil
// without one.
func (n *nodeAPI) volumeHandler() http.Handler {
	if n.volumes == nil || n.client == nil {
		return nil
	}
	return n.volumes.Handler(cluster.AuthorizeVolume(n.client))
}
