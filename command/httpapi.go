package command

import (
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/httpapi"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/internal/metrics"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/supervisor"
)

const httpAPIFlagsHelp = `  -http-addr=ADDR    The node's HTTP API: /v1/status, /v1/events (?follow=1
                     streams), /v1/logs/SERVICE, POST /v1/restart/SERVICE
                     and /v1/reset/SERVICE, and Prometheus metrics at
                     /metrics (default ` + httpapi.DefaultAddr + `: loopback only;
                     0.0.0.0:8585 for every interface; "" or "off" turns it
                     off). Registered with mariposa's own service "mariposa"
                     (its port, meta http_api), for tools and Prometheus'
                     consul_sd. With Consul ACLs on, requests need a token
                     (X-Consul-Token or Authorization: Bearer) with the
                     permission Consul would ask: node:read (status,
                     events), service:read (logs), service:write (restart,
                     reset), agent:read (metrics).`

// nodeAPI is run's HTTP API and Prometheus metrics: the metrics count
// from the first Consul request on, the API serves once the runner exists.
type nodeAPI struct {
	addr    string // as asked; "" when off
	addrSet bool   // -http-addr was given
	metrics *metrics.Metrics
	events  *httpapi.EventLog
	runner  atomic.Pointer[supervisor.Runner]
	srv     *httpapi.Server
	// volumes, when set, is served at /v1/volumes/ to the holders of the
	// slots (client checks that they hold them).
	volumes *volume.Store
	client  *api.Client
	// authClient asks Consul about the API's callers' tokens: the Consul
	// client's transport, not counted in the metrics (an "ACL support
	// disabled" answer is no failure).
	authClient *http.Client
}

func (n *nodeAPI) register(fs *flag.FlagSet) {
	n.addr = httpapi.DefaultAddr
	fs.Func("http-addr", "", func(s string) error { n.addr, n.addrSet = s, true; return nil })
}

// setup makes the metrics, reading the runner's snapshots and fl's fleet
// at scrape time, and instruments client's transport (ccfg is the config
// api.NewClient was given: it holds the client's http.Client).
func (n *nodeAPI) setup(ccfg *api.Config, fl *fleetMember) {
	if strings.EqualFold(n.addr, "off") {
		n.addr = ""
	}
	n.events = httpapi.NewEventLog(httpapi.DefaultEvents)
	n.metrics = metrics.New(metrics.Sources{
		Snapshots: func() []supervisor.Snapshot {
			if r := n.runner.Load(); r != nil {
				return r.Snapshots()
			}
			return nil
		},
		Fleet: func() (cluster.FleetStats, bool) {
			if f := fl.f.Load(); f != nil {
				return f.Stats(), true
			}
			return cluster.FleetStats{}, false
		},
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
	srv, err := httpapi.Listen(httpapi.Config{
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
		Events:  n.events,
		Target:  lazyTarget{n},
		Logs:    rings,
		Metrics: n.metrics.Handler(),
		Volumes: n.volumeHandler(),
		Auth:    httpapi.NewAuthorizer(&httpapi.ConsulChecker{BaseURL: consulBaseURL(ccfg), Client: n.authClient}, 0, 0),
		Log:     log,
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

// start serves with r.
func (n *nodeAPI) start(r *supervisor.Runner) {
	n.runner.Store(r)
	if n.srv != nil {
		go func() { _ = n.srv.Serve() }()
	}
}

func (n *nodeAPI) close() {
	if n.srv != nil {
		n.srv.Close()
	}
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
