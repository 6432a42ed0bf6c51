// Package metrics is mariposa's Prometheus metrics: one registry per
// process (never the global default one, so tests are isolated), served by
// the node's HTTP API at /metrics.
//
// What an instance does comes from the supervisor's Event stream (Event,
// one consumer beside the log), its state from the runner's snapshots read
// at scrape time; the fleet's slots and deployments from the fleet
// member's Stats (cluster.FleetStats, the step machine's executor's) at
// scrape time; Consul's latency and errors from a RoundTripper
// around the Consul client's transport (Transport). Nothing is counted in
// the supervisor's decision code.
package metrics

import (
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/supervisor"
	"github.com/mariposa-sh/mariposa/version"
)

// Info describes one metric of the registry (for the docs and their test).
type Info struct {
	Name   string
	Type   string // counter, gauge, histogram
	Help   string
	Labels []string
}

// Sources are what the metrics read at scrape time. Any may be nil.
type Sources struct {
	// Snapshots is every instance's state (supervisor.Runner.Snapshots).
	Snapshots func() []supervisor.Snapshot
	// Fleet is the fleet member's view; ok is false without one (run
	// without -cluster, or before the node has joined).
	Fleet func() (st cluster.FleetStats, ok bool)
}

// Metrics holds every metric of one mariposa process.
type Metrics struct {
	reg        *prometheus.Registry
	catalog    []Info
	collectors []prometheus.Collector // mariposa's own, as registered
	fleet      *fleetCollector
	now        func() time.Time

	// From the event stream.
	events        *prometheus.CounterVec
	restarts      *prometheus.CounterVec
	restartDelay  *prometheus.HistogramVec
	unhealthyWait *prometheus.HistogramVec
	depWaits      *prometheus.CounterVec
	depWaitTime   *prometheus.HistogramVec
	leaderTerms   *prometheus.CounterVec
	leaderLosses  *prometheus.CounterVec

	// From the renderer.
	renders      *prometheus.CounterVec
	renderErrors *prometheus.CounterVec

	// Consul requests (Transport).
	consulRequests *prometheus.CounterVec
	consulSeconds  *prometheus.HistogramVec
	consulErrors   *prometheus.CounterVec
	blocking       *prometheus.GaugeVec
	claimDelay     *prometheus.HistogramVec

	mu    sync.Mutex
	insts map[string]*instTrack // by service ID
	// resigned: the instances (by service ID) whose term's failover was
	// counted at its resignation, until the term's end (leader-lost).
	resigned map[string]bool
}

// New returns the metrics of a process, registered in a registry of their
// own with the Go and process collectors, reading src at scrape time.
func New(src Sources) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), now: time.Now, insts: map[string]*instTrack{}, resigned: map[string]bool{}}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	build := m.gaugeVec("mariposa_build_info", "Always 1; the labels name this mariposa's version and commit.", "version", "commit")
	v := version.Version
	if version.Prerelease != "" {
		v += "-" + version.Prerelease
	}
	build.WithLabelValues(v, version.Commit()).Set(1)

	m.events = m.counterVec("mariposa_events_total",
		"Supervisor events on this node, by service and kind (started, exited, restarting, failed, unhealthy, rendered, ...).",
		"service", "kind")
	m.restarts = m.counterVec("mariposa_restarts_total",
		"Restarts of an instance's process, by service and reason: exit, start-failed, unhealthy, template, dependency, leader, operator, other.",
		"service", "reason")
	m.restartDelay = m.histogramVec("mariposa_restart_delay_seconds",
		"Time from a process's unplanned end (exit, or failure to start) to the start of its next process: the backoff plus the start.",
		[]float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}, "service")
	m.unhealthyWait = m.histogramVec("mariposa_unhealthy_restart_seconds",
		"Time from the decision that a check stayed critical too long (its grace and unhealthy_for passed) to the start of the next process: the stop, the backoff and the start.",
		[]float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}, "service")
	m.depWaits = m.counterVec("mariposa_dependency_waits_total",
		"Times an instance began to wait before a start, for its depends_on or for its templates' data.",
		"service")
	m.depWaitTime = m.histogramVec("mariposa_dependency_wait_seconds",
		"How long a wait for dependencies or template data lasted, until the start it held back.",
		prometheus.ExponentialBuckets(0.1, 3, 9), "service")
	m.leaderTerms = m.counterVec("mariposa_leader_terms_total",
		"Leadership terms won by an instance on this node (its service's leader lock acquired).",
		"service")
	m.leaderLosses = m.counterVec("mariposa_leader_failovers_total",
		"Leaderships that left an instance on this node, for another to take: reason lost (the lock or its session went) or resigned (restarts exhausted).",
		"service", "reason")
	m.renders = m.counterVec("mariposa_renders_total",
		"Template renders that wrote a changed file, by service.", "service")
	m.renderErrors = m.counterVec("mariposa_render_errors_total",
		"Template renders that ended in an error (the last good file stays), by service.", "service")
	m.consulRequests = m.counterVec("mariposa_consul_requests_total",
		"Requests to Consul by mariposa's client, by operation (kv.get, kv.list, txn, health.service, session.renew, ...), blocking queries included.",
		"op")
	m.consulSeconds = m.histogramVec("mariposa_consul_request_seconds",
		"Latency of Consul requests that are not blocking queries, to the response's headers, by operation.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "op")
	m.consulErrors = m.counterVec("mariposa_consul_request_errors_total",
		"Consul requests that failed, by operation and kind: transport (no answer), client (4xx but 404), server (5xx).",
		"op", "kind")
	m.claimDelay = m.histogramVec("mariposa_claim_delay_seconds",
		"Time from a slot's vacancy, as this node saw it, to this node's claim of it, by unit: the claim rank's delay, a reschedule delay or node_lost_after, and the claim itself.",
		[]float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}, "unit")
	m.blocking = m.gaugeVec("mariposa_consul_blocking_queries",
		"Blocking queries (requests with an index) waiting for Consul's answer now, by operation.", "op")
	ic := &instanceCollector{src: src.Snapshots,
		desc: m.desc("mariposa_instances", "gauge", "Instances on this node by service and state (starting, waiting, running, backoff, failed, completed, standby, stopping, stopped).", "service", "state")}
	m.fleet = newFleetCollector(m, src.Fleet)
	m.register(ic)
	m.register(m.fleet)
	sort.Slice(m.catalog, func(i, j int) bool { return m.catalog[i].Name < m.catalog[j].Name })
	return m
}

// ObserveClaim records one claim by this node of a slot of unit that was
// vacant for d (fleet/executor's Config.OnClaim).
func (m *Metrics) ObserveClaim(unit string, d time.Duration) {
	m.claimDelay.WithLabelValues(unit).Observe(d.Seconds())
}

// Registry is the process's registry (what /metrics serves).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Catalog lists every mariposa_* metric, by name.
func (m *Metrics) Catalog() []Info { return append([]Info(nil), m.catalog...) }

// ObserveRender counts one template render of service: err says it failed.
func (m *Metrics) ObserveRender(service string, changed bool, err bool) {
	switch {
	case err:
		m.renderErrors.WithLabelValues(service).Inc()
	case changed:
		m.renders.WithLabelValues(service).Inc()
	}
}

func (m *Metrics) register(c prometheus.Collector) {
	m.reg.MustRegister(c)
	m.collectors = append(m.collectors, c)
}

func (m *Metrics) note(name, typ, help string, labels []string) {
	m.catalog = append(m.catalog, Info{Name: name, Type: typ, Help: help, Labels: labels})
}

func (m *Metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	m.note(name, "counter", help, labels)
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	m.register(c)
	return c
}

func (m *Metrics) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	m.note(name, "gauge", help, labels)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	m.register(g)
	return g
}

func (m *Metrics) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	m.note(name, "histogram", help, labels)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	m.register(h)
	return h
}

// desc is a metric a collector of this package computes at scrape time.
func (m *Metrics) desc(name, typ, help string, labels ...string) *prometheus.Desc {
	m.note(name, typ, help, labels)
	return prometheus.NewDesc(name, help, labels, nil)
}

// instanceCollector counts the instances by state at scrape time.
type instanceCollector struct {
	src  func() []supervisor.Snapshot
	desc *prometheus.Desc
}

// States lists every instance state, so that each service reports all of
// them (0 for the ones it is not in).
func (c *instanceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *instanceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	counts := map[string]map[supervisor.State]int{}
	for _, s := range c.src() {
		byState := counts[s.Service]
		if byState == nil {
			byState = map[supervisor.State]int{}
			counts[s.Service] = byState
		}
		byState[s.State]++
	}
	// Only the states an instance is in: every state of every service,
	// zeros included, made 1,000 idle services 9,000 series and a scrape
	// four times the cost (the idle overhead benchmark). A state nobody is
	// in is absent: query it with `or vector(0)`.
	for svc, byState := range counts {
		for st, n := range byState {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), svc, string(st))
		}
	}
}
