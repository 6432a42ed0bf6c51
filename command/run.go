package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/coord"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/internal/users"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
	"github.com/mariposa-sh/mariposa/version"
)

// RunCommand runs services in the foreground.
type RunCommand struct {
	UI cli.Ui

	// Signals, when set, replaces the process's signal delivery (tests).
	Signals chan os.Signal
	// Stderr receives the log (default os.Stderr).
	Stderr interface{ Write([]byte) (int, error) }
}

func (c *RunCommand) Synopsis() string { return "Runs and supervises services from HCL files" }

func (c *RunCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa run [options] PATH...
       mariposa run -cluster [options] [PATH...]

  Registers each service in the HCL files (a directory means every *.hcl in
  it) with the local Consul agent, starts its process and supervises it until
  SIGINT or SIGTERM. Linux only.

  Signals:

    SIGINT, SIGTERM   Stop: deregister, stop every service in reverse
                      dependency order, exit 0. A second one kills every
                      process group at once.
    SIGHUP            Reload the files: changed services restart, new ones
                      start, removed ones stop; unchanged ones are untouched.
                      If the files have errors, they are logged and nothing
                      changes.
    SIGUSR1, SIGUSR2  Forwarded to every child's process group.

Options:

  -var NAME=VALUE    Set a variable; repeatable. MARIPOSA_VAR_NAME works too.
  -log-level=LEVEL   trace, debug, info (default), warn, error.
  -log-json          Log JSON lines.
  -liveness-ttl=3s   TTL of mariposa's own liveness check.
  -allow-second-supervisor
                     Run even when another mariposa supervises this node
                     (by default the node lock refuses a second one, which
                     would take over the first one's registrations). It
                     registers its own mariposa-<node>-<pid>-<nonce>
                     service.
  -cluster           Take part in the fleet: run the instances of cluster
                     units (services with a count, deployed with "mariposa
                     deploy" or in these files) whose slots this node
                     claims. Without it, a service with a count is an error,
                     and the node is not a fleet node: it never takes a
                     slot and the fleet does not count it.
` + reserveFlagHelp + `
  -cgroup-parent=mariposa
                     The control group under which each instance gets its
                     own (below mariposa's own group, in every hierarchy
                     used; $MARIPOSA_CGROUP_PARENT works too). "none": no
                     control groups (a stop kills the process group only).
  -dev               If no Consul agent answers, start a local dev agent
                     (the consul binary from $MARIPOSA_CONSUL_BIN, the cache
                     of "make consul", or PATH) and stop it on exit.
` + auditFlagsHelp + `
` + httpAPIFlagsHelp + `
` + volumeFlagsHelp + `

` + consulFlagsHelp + `
` + controlSocketHelp + `

  The ACL token is never passed to the children or logged.
`)
}

// runSupported is proc.Supported; tests replace it.
var runSupported = proc.Supported

type varFlags map[string]string

func (v varFlags) String() string { return "" }
func (v varFlags) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("-var wants NAME=VALUE, got %q", s)
	}
	v[k] = val
	return nil
}

func (c *RunCommand) Run(args []string) int {
	vars := varFlags{}
	var (
		cf          consulFlags
		level       string
		logJSON     bool
		dev         bool
		liveness    time.Duration
		controlSock string
		allowSecond bool
		clusterMode bool
		audit       auditFlags
		httpAPI     nodeAPI
		volumes     volumeFlags
		reserve     reserveFlag
	)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	audit.register(fs)
	httpAPI.register(fs)
	volumes.register(fs)
	fs.Var(vars, "var", "")
	fs.StringVar(&level, "log-level", "info", "")
	fs.BoolVar(&logJSON, "log-json", false, "")
	fs.BoolVar(&dev, "dev", false, "")
	fs.DurationVar(&liveness, "liveness-ttl", 3*time.Second, "")
	fs.StringVar(&controlSock, "control-socket", "", "")
	fs.BoolVar(&allowSecond, "allow-second-supervisor", false, "")
	fs.BoolVar(&clusterMode, "cluster", false, "")
	fs.Var(&reserve, "reserve", "")
	cgroupParent := "mariposa"
	if v := os.Getenv("MARIPOSA_CGROUP_PARENT"); v != "" {
		cgroupParent = v
	}
	fs.StringVar(&cgroupParent, "cgroup-parent", cgroupParent, "")
	paths, ok := parsePathsOpt(c.UI, fs, args, c.Help(), "mariposa run: no service files given", &clusterMode)
	if !ok {
		return 1
	}
	if err := runSupported(); err != nil {
		c.UI.Error("mariposa run needs Linux: " + err.Error() + ` ("mariposa validate", "fmt" and "status" work here)`)
		return 1
	}
	if hclog.LevelFromString(level) == hclog.NoLevel {
		c.UI.Error(fmt.Sprintf("mariposa run: unknown -log-level %q (trace, debug, info, warn, error)", level))
		return 1
	}
	if err := audit.check(); err != nil {
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	}
	if reserve.set && !clusterMode {
		c.UI.Error("mariposa run: -reserve goes with -cluster: it keeps capacity out of the fleet's placement")
		return 1
	}

	ccfg, err := cf.config()
	if err != nil {
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	}

	// The same checks as validate: templates parse, programs and dirs
	// exist here (warnings).
	loadOpts := schema.LoadOptions{Vars: vars, CheckTemplate: render.CheckTemplate, CheckHost: true, Users: userCheck(true)}
	load := func() (*schema.Config, *schema.Diagnostics) {
		if len(paths) == 0 { // run -cluster with no files: only what is deployed
			return &schema.Config{}, &schema.Diagnostics{}
		}
		return schema.Load(paths, loadOpts)
	}
	cfg, diags := load()
	if diags.HasErrors() {
		var b strings.Builder
		_ = diags.WriteText(&b, 100, false)
		c.UI.Error(strings.TrimRight(b.String(), "\n"))
		return 1
	}

	if !clusterMode {
		for _, svc := range cfg.Services {
			if svc.Placement != nil {
				c.UI.Error(fmt.Sprintf("mariposa run: service %q has a count: it runs in slots across the fleet; start mariposa with -cluster (%s)", svc.Name, svc.SourceFile))
				return 1
			}
		}
	}
	// A fleet node publishes its capacity with its registration.
	selfMeta := fleetMeta(clusterMode)
	if clusterMode {
		capa, err := nodeCapacity(reserve.r, cfg)
		if err != nil {
			c.UI.Error("mariposa run: " + err.Error())
			return 1
		}
		maps.Copy(selfMeta, placement.CapacityMeta(capa))
	}

	stderr := c.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "mariposa", Level: hclog.LevelFromString(level),
		JSONFormat: logJSON, Output: stderr, TimeFormat: "2006-01-02T15:04:05.000Z0700"})
	if diags.Len() > 0 {
		var b strings.Builder
		_ = diags.WriteText(&b, 100, false)
		log.Warn("configuration warnings\n" + b.String())
	}
	if w := fleetEngineWarning(); w != "" && clusterMode {
		log.Warn(w)
	}

	// An upgrade in place: what the previous image of this process handed
	// over (its children, sessions and terms; command/upgrade.go).
	handed, err := takeUpgradeState()
	if err != nil {
		// Past the exec: the children die with this process (their
		// parent-death signal), as after a crash (website/upgrade.md).
		log.Error("cannot take over from the previous mariposa", "error", err)
		return 1
	}
	started := time.Now()
	var adopt *supervisor.Handover
	adoptedSlots := ""
	if handed != nil {
		adopt, started = handed.Runner, handed.Runner.Started
		if handed.Fleet != nil {
			adoptedSlots = handed.Fleet.Session
		}
		log.Info("upgraded in place", "from", handed.From, "to", version.String(), "instances", len(adopt.Instances))
	}
	control.SetVersion(version.String)

	// As PID 1 (in a container) we inherit every orphan: reap them.
	if os.Getpid() == 1 {
		proc.EnableReaper()
		log.Info("running as PID 1: reaping orphaned processes")
		if adopt != nil {
			proc.ExpectAdoption(adopt.PIDs())
		}
	}

	cgroups := openCgroups(cgroupParent, log)

	sigs := c.Signals
	if sigs == nil {
		sigs = make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		defer signal.Stop(sigs)
	}
	// Children start with default dispositions, whatever we inherited.
	if reset := proc.ResetIgnoredSignals(); len(reset) > 0 {
		log.Debug("reset inherited ignored signals to their defaults", "signals", fmt.Sprint(reset))
	}

	client, err := api.NewClient(ccfg)
	if err != nil {
		c.UI.Error("mariposa run: consul client: " + err.Error())
		return 1
	}

	var devAgent *devConsul
	if dev && !agentAnswers(client) {
		devAgent, err = startDevConsul(ccfg.Address, log)
		if err != nil {
			c.UI.Error("mariposa run -dev: " + err.Error())
			return 1
		}
		defer devAgent.stop()
	}

	sink := proc.NewSink(4096, childWriter(log, logJSON), func(n int64) {
		log.Warn("log sink fell behind; dropped child output lines", "dropped", n)
	})
	defer sink.Close()

	// The last lines of each service's output, for `mariposa logs`: fed
	// from the children's pipes directly, so a slow log never loses them.
	rings := logring.NewSet(logring.DefaultMaxLines, logring.DefaultMaxBytes)
	fl := newFleetMember(clusterMode, client, log)
	if handed != nil {
		fl.adoptAgent = handed.Fleet
	}
	fl.auditRetention = audit.retention
	if clusterMode {
		// Slots with volume blocks keep their data here (and hand it
		// off through the HTTP API).
		fl.volumes = volumes.open(log)
		httpAPI.volumes = fl.volumes
		httpAPI.client = client
	}
	// The node's HTTP API and Prometheus metrics (-http-addr).
	httpAPI.setup(ccfg, fl)
	fl.onClaim = httpAPI.metrics.ObserveClaim
	if err := httpAPI.listen(ccfg, rings, log); err != nil {
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	}
	defer httpAPI.close()
	logEvents := supervisor.LogEvents(log)
	// The node's audit file: every instance event, one JSON line each.
	auditEvents, closeAudit, err := audit.open(controlSock, log)
	if err != nil {
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	}
	defer closeAudit()
	r := supervisor.New(cfg, supervisor.Options{Client: client, ConsulConfig: ccfg, Logger: log, Sink: sink, LivenessTTL: liveness,
		AllowSecondSupervisor: allowSecond, Started: started, SelfMeta: selfMeta, Adopt: adopt, AdoptedSlotSession: adoptedSlots,
		OnOutput: func(l proc.Line) { rings.Add(l.Name, logring.Line{Stream: l.Stream, Text: l.Text}) },
		Events:   func(e supervisor.Event) { logEvents(e); auditEvents(e); fl.event(e); httpAPI.event(e) },
		Stopped:  fl.stopped,
		// Templates with a coordinate block reload a few at a time
		// across the fleet, under Consul semaphore tokens.
		ReloadGate: coord.New(client, log.Named("reload")),
		HTTPAPI:    httpAPI.boundAddr(),
		OnRender:   httpAPI.metrics.ObserveRender,
		Cgroups:    cgroups,
	})
	if handed != nil {
		control.SetUpgraded(func() *control.Upgraded {
			u := &control.Upgraded{From: handed.From}
			if gap, ok := r.UpgradeGap(); ok {
				u.CheckGapSecs = gap.Seconds()
			}
			return u
		})
	}
	httpAPI.start(r, log)
	// Below "alive" in mariposa's liveness check: the open API's warning,
	// then the slots the fleet waits for.
	r.SetLivenessNote(func() string { return joinNotes(httpAPI.warning(), fl.waiting()) })
	fl.apiURL = handoffURL(client, httpAPI.boundAddr())
	fl.start(r, cfg)
	// The local control channel (mariposa restart, reset, logs).
	up := &nodeUpgrader{r: r, sink: sink, log: log.Named("upgrade"), dev: devAgent != nil, busy: make(chan struct{}, 1), fleet: fl}
	srv, err := control.Listen(control.ResolvePath(controlSock), upgradeTarget{controlTarget{r}, up}, rings, log)
	if err != nil {
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()
	// systemd (Type=notify): ready once the services are registered; the
	// start's memory goes back then too.
	stopNotify := make(chan struct{})
	defer close(stopNotify)
	go afterRegistration(log, r.Registered(), stopNotify)
	err = r.RunWithSignals(supervisor.SignalOptions{
		Signals: sigs,
		Load: func() *schema.Config {
			ncfg, ndiags := load()
			var b strings.Builder
			_ = ndiags.WriteText(&b, 100, false)
			if ndiags.HasErrors() {
				log.Error("reload failed: the files have errors; the running configuration is unchanged\n" + b.String())
				return nil
			}
			if ndiags.Len() > 0 {
				log.Warn("configuration warnings\n" + b.String())
			}
			if !clusterMode {
				for _, svc := range ncfg.Services {
					if svc.Placement != nil {
						log.Error("reload failed: service " + svc.Name + " has a count, and this mariposa runs without -cluster; the running configuration is unchanged")
						return nil
					}
				}
			} else if capa, err := nodeCapacity(reserve.r, ncfg); err == nil {
				// The node's own services may reserve more or less now.
				r.SetSelfMeta(placement.CapacityMeta(capa))
			}
			fl.setLocal(ncfg)
			return ncfg
		},
		Applied: func(res supervisor.ApplyResult) {
			for _, name := range res.Stopped {
				rings.Remove(name)
			}
		},
		Stopping: func() {
			notifyStopping(log)
			// The control socket stays open until mariposa exits (its
			// deferred Close): closing it here took a quarter of a
			// millisecond ahead of every service's stop, and a request
			// that comes in meanwhile finds the services stopping.
			fl.halt() // no claims while stopping
		},
	})
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		c.UI.Error("mariposa run: " + err.Error())
		return 1
	case err != nil:
		log.Error("supervisor failed", "error", err)
		return 1
	}
	return 0
}

// childWriter logs child output lines, one named logger per service. In
// text logs a stderr line reads "mariposa.web: stderr: <text>" (stdout lines
// are the text alone); JSON logs carry the stream as a field.
func childWriter(log hclog.Logger, jsonFormat bool) func(proc.Line) {
	var mu sync.Mutex
	named := map[string]hclog.Logger{}
	return func(l proc.Line) {
		mu.Lock()
		lg, ok := named[l.Name]
		if !ok {
			lg = log.Named(l.Name)
			named[l.Name] = lg
		}
		mu.Unlock()
		switch {
		case jsonFormat:
			lg.Info(l.Text, "stream", l.Stream)
		case l.Stream == "stderr":
			lg.Info("stderr: " + l.Text)
		default:
			lg.Info(l.Text)
		}
	}
}

func agentAnswers(c *api.Client) bool {
	_, err := c.Status().Leader()
	return err == nil
}

// upgradeTarget is the control socket's target: the runner, and the
// upgrade in place (the node's HTTP API does not offer it).
type upgradeTarget struct {
	controlTarget
	*nodeUpgrader
}

// controlTarget lets the control channel act on the runner.
type controlTarget struct{ r *supervisor.Runner }

// operatorTimeout bounds an operator's request: a restart waits only for
// the loop to take it, not for the stop to finish.
const operatorTimeout = 10 * time.Second

func (t controlTarget) Restart(service, by string) error {
	ctx, cancel := context.WithTimeout(context.Background(), operatorTimeout)
	defer cancel()
	return controlErr(t.r.Restart(ctx, service, by))
}

func (t controlTarget) ResetFailed(service, by string) error {
	ctx, cancel := context.WithTimeout(context.Background(), operatorTimeout)
	defer cancel()
	return controlErr(t.r.ResetFailed(ctx, service, by))
}

func (t controlTarget) Services() []string { return t.r.Services() }

func controlErr(err error) error {
	var unknown *supervisor.UnknownServiceError
	if errors.As(err, &unknown) {
		return fmt.Errorf("%w: %s", control.ErrNoService, err)
	}
	return err
}

// fleetMeta is the meta of mariposa's own service that says this node runs
// the fleet: only such nodes are placement candidates.
func fleetMeta(clusterMode bool) map[string]string {
	if !clusterMode {
		return nil
	}
	return map[string]string{checks.FleetMetaKey: checks.FleetMetaValue}
}

// openCgroups makes the parent of the instances' control groups, or says
// at the start why there is none.
func openCgroups(parent string, log hclog.Logger) *cgroup.Manager {
	if parent == "none" || parent == "" {
		log.Warn("control groups off (-cgroup-parent=none): a stop kills each service's process group only; a child that left it (setsid) outlives the stop")
		return nil
	}
	m, err := cgroup.Open(parent)
	if err != nil {
		log.Warn("no control group per instance: a stop kills each service's process group only, and a child that left it (setsid) outlives the stop; resource limits are not applied", "error", err)
		return nil
	}
	log.Info("a control group per instance", "hierarchies", m.Describe())
	return m
}

// userCheck checks services' users on this machine: errors for run
// (nothing starts half-configured), warnings for validate.
func userCheck(strict bool) *schema.UserCheck {
	return &schema.UserCheck{Strict: strict, CanSwitch: users.CanSwitch,
		Resolve: func(u, g string) error { _, err := users.Resolve(u, g); return err }}
}
