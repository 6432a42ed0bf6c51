package schema

import (
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
)

const maxCount = math.MaxInt32

// decodeCheck decodes a check block of a service whose port is port (0:
// none), which a path-only http target and a host-less tcp target need.
func (l *loader) decodeCheck(e *evaluator, block *hcl.Block, port int) *Check {
	c := &Check{Name: block.Labels[0], Interval: 10 * time.Second, Timeout: 5 * time.Second}
	content, diags := bodyContent(block.Body, checkSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes

	var kinds []*hcl.Attribute
	for _, k := range checkKinds {
		if attr, ok := attrs[k]; ok {
			kinds = append(kinds, attr)
		}
	}
	// Ranges sort by position so "the second kind" is the one written second.
	sortAttrs(kinds)
	switch {
	case len(kinds) == 0:
		l.errorf(block.DefRange, "Check has no kind",
			"Check %q needs exactly one of http, tcp, grpc, args or ttl to say what it probes.", c.Name)
	case len(kinds) > 1:
		l.errorf(kinds[1].NameRange, "Check has several kinds",
			"Check %q sets both %q and %q; a check has exactly one of http, tcp, grpc, args or ttl. Write a second check block for the second probe.",
			c.Name, kinds[0].Name, kinds[1].Name)
	}
	if len(kinds) > 0 {
		attr := kinds[0]
		c.Kind = CheckKind(attr.Name)
		switch c.Kind {
		case CheckHTTP:
			if s, ok := e.String(attr); ok {
				if strings.HasPrefix(s, "/") {
					// A path: on the service's registered address and port.
					if u, err := url.Parse("http://h" + s); err != nil || u.Host != "h" || strings.HasPrefix(s, "//") {
						l.errorf(attr.Expr.Range(), "Invalid check target",
							`The http check's path %q is not a URL path ("//" would start a host): write a path such as "/health", or the whole URL.`, s)
					} else if port == 0 {
						l.errorf(attr.Expr.Range(), "Check needs the service's port",
							`The http check %q gives a path only, %q, which is probed on the service's own address and port, and the service has no port. Set the service's port, or give the whole URL such as "http://127.0.0.1:8080/health".`, c.Name, s)
					} else {
						c.Target = s
					}
				} else if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					l.errorf(attr.Expr.Range(), "Invalid check target",
						`The http check needs an absolute http:// or https:// URL such as "http://127.0.0.1:8080/health", or a path such as "/health" on the service's own address and port; got %q.`, s)
				} else {
					c.Target = s
				}
			}
		case CheckTCP:
			if s, ok := e.String(attr); ok {
				switch {
				case s == "":
					// The service's registered address and port.
					if port == 0 {
						l.errorf(attr.Expr.Range(), "Check needs the service's port",
							`The tcp check %q is empty, which probes the service's own address and port, and the service has no port. Set the service's port, or give host:port such as "127.0.0.1:5432".`, c.Name)
					} else {
						c.Target = s
					}
				case strings.HasPrefix(s, ":"):
					// A port on the service's registered address.
					if err := checkHostPort("h" + s); err != nil {
						l.errorf(attr.Expr.Range(), "Invalid check target",
							`The tcp check needs host:port such as "127.0.0.1:5432", :port on the service's own address, or "" for its address and port: %s.`, err)
					} else {
						c.Target = s
					}
				default:
					if err := checkHostPort(s); err != nil {
						l.errorf(attr.Expr.Range(), "Invalid check target",
							`The tcp check needs host:port such as "127.0.0.1:5432", :port on the service's own address, or "" for its address and port: %s.`, err)
					} else {
						c.Target = s
					}
				}
			}
		case CheckGRPC:
			if s, ok := e.String(attr); ok {
				hostPort, _, _ := strings.Cut(s, "/")
				if err := checkHostPort(hostPort); err != nil {
					l.errorf(attr.Expr.Range(), "Invalid check target",
						`The grpc check needs host:port or host:port/service such as "127.0.0.1:9090/health": %s.`, err)
				} else {
					c.Target = s
				}
			}
		case CheckArgs:
			c.Args, _ = e.Argv(attr, "The args check needs a program to run.")
		case CheckTTL:
			if d, ok := e.Duration(attr); ok {
				if d <= 0 {
					l.errorf(attr.Expr.Range(), "Invalid duration", "The ttl of a check must be greater than zero.")
				} else {
					c.TTL = d
				}
			}
		}
	}
	for _, name := range []string{"interval", "timeout"} {
		attr, ok := attrs[name]
		if !ok {
			continue
		}
		if c.Kind == CheckTTL {
			l.errorf(attr.NameRange, "Not valid on a ttl check",
				"Consul rejects %s on a TTL check: the application reports its state itself, at least once per ttl. Remove %q, or probe with http, tcp, grpc or args instead.",
				name, name)
			continue
		}
		d, ok := e.Duration(attr)
		if !ok {
			continue
		}
		if d <= 0 {
			l.errorf(attr.Expr.Range(), "Invalid duration", "The %s of a check must be greater than zero.", name)
			continue
		}
		if name == "interval" {
			c.Interval = d
		} else {
			c.Timeout = d
		}
	}
	if c.Kind == CheckTTL {
		c.Interval, c.Timeout = 0, 0
	}
	if attr, ok := attrs["success_before_passing"]; ok {
		c.SuccessBeforePassing, _ = e.Int(attr, 0, maxCount)
	}
	if attr, ok := attrs["failures_before_critical"]; ok {
		c.FailuresBeforeCritical, _ = e.Int(attr, 0, maxCount)
	}
	if attr, ok := attrs["deregister_critical_after"]; ok {
		c.DeregisterCriticalAfter, _ = e.Duration(attr)
	}
	return c
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host == "" {
		return errString("the host is empty")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return errString("the port must be a number from 1 to 65535")
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

func sortAttrs(attrs []*hcl.Attribute) {
	for i := 1; i < len(attrs); i++ {
		for j := i; j > 0 && attrs[j].Range.Start.Byte < attrs[j-1].Range.Start.Byte; j-- {
			attrs[j], attrs[j-1] = attrs[j-1], attrs[j]
		}
	}
}

// decodeRestart decodes svc's restart block; svc.Placement says whether
// on_exhausted may be "reschedule".
func (l *loader) decodeRestart(e *evaluator, block *hcl.Block, hasChecks bool, svc *Service) Restart {
	r := Restart{
		Policy:      RestartOnFailure,
		OnUnhealthy: hasChecks,
		Grace:       10 * time.Second,
		Attempts:    10,
		Window:      5 * time.Minute,
		Delay:       time.Second,
		MaxDelay:    time.Minute,
		OnExhausted: "fail",
	}
	if block == nil {
		return r
	}
	content, diags := bodyContent(block.Body, restartSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes
	if attr, ok := attrs["policy"]; ok {
		if s, ok := e.Enum(attr, "Invalid restart policy", restartPolicies); ok {
			r.Policy = RestartPolicy(s)
		}
	}
	if attr, ok := attrs["on_unhealthy"]; ok {
		if b, ok := e.Bool(attr); ok {
			r.OnUnhealthy = b
			if b && !hasChecks {
				l.warnf(attr.Expr.Range(), "No checks to act on",
					"on_unhealthy restarts the service when a check stays critical, but the service has no check block.")
			}
		}
	}
	if attr, ok := attrs["grace"]; ok {
		if d, ok := e.Duration(attr); ok {
			r.Grace = d
		}
	}
	if attr, ok := attrs["unhealthy_for"]; ok {
		r.UnhealthyFor, _ = e.Duration(attr)
	}
	if attr, ok := attrs["attempts"]; ok {
		if n, ok := e.Int(attr, 0, maxCount); ok {
			r.Attempts = n
		}
	}
	if attr, ok := attrs["window"]; ok {
		if d, ok := e.Duration(attr); ok {
			if d <= 0 && r.Attempts > 0 {
				l.errorf(attr.Expr.Range(), "Invalid duration",
					"The window counts restart attempts and must be greater than zero; set attempts = 0 for unlimited restarts.")
			} else {
				r.Window = d
			}
		}
	}
	delayOK := true
	if attr, ok := attrs["delay"]; ok {
		if d, ok := e.Duration(attr); ok {
			if d < 0 {
				// 0 is allowed: restart at once, with attempts/window still
				// bounding a crash loop.
				l.errorf(attr.Expr.Range(), "Invalid duration",
					`The restart delay cannot be negative. Use "0s" to restart at once (attempts and window still bound a crash loop), or a delay such as "1s".`)
				delayOK = false
			} else {
				r.Delay = d
			}
		} else {
			delayOK = false
		}
	}
	l.checkMaxDelay(e, attrs, delayOK, r.Delay, &r.MaxDelay, "The backoff starts at delay (%s) and doubles")
	if attr, ok := attrs["on_exhausted"]; ok {
		if s, ok := e.Enum(attr, "Invalid on_exhausted", onExhaustedValues); ok {
			switch {
			case s != "reschedule" || svc.Placement != nil:
				r.OnExhausted = s
			case svc.Group != "":
				l.errorf(attr.Expr.Range(), "Reschedule without count",
					`on_exhausted = "reschedule" hands the instance's slot to another node, and only cluster units have slots: add count = N to group %q (its services move as one), or use "fail".`, svc.Group)
			default:
				l.errorf(attr.Expr.Range(), "Reschedule without count",
					`on_exhausted = "reschedule" hands the instance's slot to another node, and only cluster units have slots: add count = N to service %q, or use "fail".`, svc.Name)
			}
		}
	}
	return r
}

func (l *loader) decodeDependency(e *evaluator, block *hcl.Block) *Dependency {
	label := block.Labels[0]
	d := &Dependency{Name: label, Service: label, OnLost: "ignore", EnvPrefix: defaultEnvPrefix(label)}
	content, diags := bodyContent(block.Body, dependsSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes
	if attr, ok := attrs["service"]; ok {
		if s, ok := e.String(attr); ok {
			if s == "" {
				l.errorf(attr.Expr.Range(), "Invalid dependency", "The service to depend on must not be empty; leave service out to use the label.")
			} else {
				d.Service = s
			}
		}
	}
	if attr, ok := attrs["tag"]; ok {
		d.Tag, _ = e.String(attr)
	}
	regAttr, regSet := attrs["registered"]
	passAttr, passSet := attrs["passing"]
	countsOK := true
	if regSet {
		n, ok := e.Int(regAttr, 0, maxCount)
		d.Registered, countsOK = n, countsOK && ok
	}
	if passSet {
		n, ok := e.Int(passAttr, 0, maxCount)
		d.Passing, countsOK = n, countsOK && ok
	}
	if !regSet && !passSet {
		d.Passing = 1
	}
	if countsOK && d.Registered == 0 && d.Passing == 0 {
		l.errorf(block.DefRange, "Empty dependency condition",
			"The dependency %q waits for nothing: registered and passing are both 0. Require at least one instance, or remove the block.", label)
	}
	if attr, ok := attrs["timeout"]; ok {
		d.Timeout, _ = e.Duration(attr)
	}
	if attr, ok := attrs["on_lost"]; ok {
		if s, ok := e.Enum(attr, "Invalid on_lost", onLostValues); ok {
			d.OnLost = s
		}
	}
	if attr, ok := attrs["env_prefix"]; ok {
		if s, ok := e.String(attr); ok {
			if !envName.MatchString(s) {
				l.errorf(attr.Expr.Range(), "Invalid env_prefix",
					"%q cannot start an environment variable name: use letters, digits and underscores, not starting with a digit.", s)
			} else {
				d.EnvPrefix = s
			}
		}
	}
	return d
}

// defaultEnvPrefix is the label upper-cased with non-alphanumerics as "_".
func defaultEnvPrefix(label string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(label) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (l *loader) decodeTemplate(e *evaluator, block *hcl.Block, svc *Service, p *parsed) (*Template, hcl.Range) {
	t := &Template{Perms: 0o644, ChangeMode: "restart"}
	content, diags := bodyContent(block.Body, templateSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes
	ok := !diags.HasErrors()

	srcAttr, hasSrc := attrs["source"]
	conAttr, hasCon := attrs["contents"]
	srcName := "" // the source as diagnostics show it
	switch {
	case hasSrc && hasCon:
		l.errorf(conAttr.NameRange, "Both source and contents",
			"A template has either source (a file next to the HCL file) or contents (inline text), not both.")
		ok = false
	case !hasSrc && !hasCon:
		l.errorf(block.DefRange, "Missing template source",
			`A template needs source = "file.tpl" (relative to the HCL file) or contents = <<-EOT ... EOT.`)
		ok = false
	case hasSrc:
		if s, sok := e.String(srcAttr); sok && s != "" && !strings.ContainsRune(s, 0) {
			srcName = s
			if !filepath.IsAbs(s) {
				srcName = filepath.Join(filepath.Dir(p.name), s)
				s = filepath.Join(p.dir, s)
			}
			s = filepath.Clean(s)
			if fi, err := os.Stat(s); err != nil {
				l.errorf(srcAttr.Expr.Range(), "Template source not found", "Cannot read the template source %s: %v.", s, errorsCause(err))
				ok = false
			} else if fi.IsDir() {
				l.errorf(srcAttr.Expr.Range(), "Template source not found", "The template source %s is a directory, not a file.", s)
				ok = false
			} else {
				t.Source = s
			}
		} else {
			if sok {
				l.errorf(srcAttr.Expr.Range(), "Template source not found", "The template source must be a non-empty path.")
			}
			ok = false
		}
	case hasCon:
		if s, sok := e.String(conAttr); sok {
			t.Contents = s
		} else {
			ok = false
		}
	}
	if attr, aok := attrs["destination"]; aok {
		if s, sok := e.String(attr); sok && s != "" && !strings.ContainsRune(s, 0) {
			if !filepath.IsAbs(s) {
				base := svc.Dir
				if base == "" {
					base = p.dir
				}
				s = filepath.Join(base, s)
			}
			t.Destination = filepath.Clean(s)
		} else {
			if sok {
				l.errorf(attr.Expr.Range(), "Invalid template destination", "The destination must be a non-empty path.")
			}
			ok = false
		}
	}
	if attr, aok := attrs["perms"]; aok {
		if perms, pok := e.Perms(attr); pok {
			t.Perms = perms
		}
	}
	if attr, aok := attrs["user"]; aok {
		t.User, _ = l.userName(e, attr, "user")
	}
	if attr, aok := attrs["group"]; aok {
		t.Group, _ = l.userName(e, attr, "group")
	}
	modeAttr, hasMode := attrs["change_mode"]
	if hasMode {
		if s, mok := e.Enum(modeAttr, "Invalid change_mode", templateChangeModes); mok {
			t.ChangeMode = s
		}
	}
	if attr, aok := attrs["signal"]; aok {
		if sig, sok := e.Signal(attr); sok {
			t.Signal = sig
		}
	}
	if t.ChangeMode == "signal" && t.Signal == 0 {
		t.Signal = syscall.SIGHUP
	}
	if attr, aok := attrs["signal"]; aok && hasMode && t.ChangeMode != "signal" {
		l.warnf(attr.NameRange, "Signal not used",
			`The template's signal is only sent with change_mode = "signal"; change_mode is %q.`, t.ChangeMode)
	}
	if attr, aok := attrs["command"]; aok {
		t.Command, _ = e.Argv(attr, "The template's change command needs a program to run.")
	} else if t.ChangeMode == "command" {
		l.errorf(modeAttr.Expr.Range(), "Missing change command",
			`change_mode = "command" runs the template's command after each change; set command = ["program", "arg"].`)
	}
	if attr, aok := attrs["wait"]; aok {
		t.WaitMin, t.WaitMax = l.decodeWait(e, attr)
	}
	if attr, aok := attrs["env"]; aok {
		t.Env, _ = e.Bool(attr)
	}
	if t.Env && hasMode && t.ChangeMode != "restart" {
		l.warnf(modeAttr.NameRange, "change_mode not used",
			`change_mode is ignored with env = true; an env template restarts the process, since its environment cannot change otherwise. Remove change_mode = %q, or render a file the process reads instead of its environment.`,
			t.ChangeMode)
	}
	var coord []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "coordinate" {
			coord = append(coord, b)
		}
	}
	if len(coord) > 0 {
		t.Coordinate = l.decodeCoordinate(e, coord, t, svc)
	}
	if !ok {
		return nil, block.DefRange
	}
	if hasSrc {
		l.checkTemplate(t, srcAttr, p, srcName)
	} else {
		l.checkTemplate(t, conAttr, p, "")
	}
	return t, attrs["destination"].Expr.Range()
}

// decodeCoordinate reads a template's coordinate block (the first of
// blocks; a template has one): max_parallel from 1 (the default), and a
// change_mode whose action it can pace, a restart or a signal.
func (l *loader) decodeCoordinate(e *evaluator, blocks []*hcl.Block, t *Template, svc *Service) *Coordinate {
	b := blocks[0]
	for _, dup := range blocks[1:] {
		l.errorf(dup.DefRange, "Duplicate coordinate block",
			"This template already has a coordinate block at %s; there can be only one.", at(b.DefRange))
	}
	c := &Coordinate{MaxParallel: DefaultCoordinateMaxParallel}
	content, diags := bodyContent(b.Body, coordinateSchema)
	l.diags = append(l.diags, diags...)
	if attr, ok := content.Attributes["max_parallel"]; ok {
		if n, ok := e.Int(attr, math.MinInt64, math.MaxInt64); ok {
			if n < 1 || n > maxSlots {
				l.errorf(attr.Expr.Range(), "Invalid max_parallel",
					"max_parallel is how many instances of service %q restart or signal at once after a change of this template, from 1 to %d; got %d. To let every instance act at once, remove the coordinate block.",
					svc.Name, maxSlots, n)
			} else {
				c.MaxParallel = n
			}
		}
	}
	if !t.Env {
		switch t.ChangeMode {
		case "noop":
			l.errorf(b.DefRange, "Nothing to coordinate",
				`change_mode = "noop" neither restarts nor signals the process after a change, so coordinate has nothing to pace. Use change_mode = "restart" or "signal", or remove the coordinate block.`)
		case "command":
			l.errorf(b.DefRange, "Nothing to coordinate",
				`coordinate paces the restarts and signals a change causes; change_mode = "command" runs the template's command instead, whose end says nothing about the instance's health. Use change_mode = "restart" or "signal", or remove the coordinate block.`)
		}
	}
	return c
}

// decodeWait reads { min = "2s", max = "10s" }. As in consul-template, a
// missing max is four times min.
func (l *loader) decodeWait(e *evaluator, attr *hcl.Attribute) (time.Duration, time.Duration) {
	v, ok := e.value(attr)
	if !ok {
		return 0, 0
	}
	if !v.Type().IsObjectType() && !v.Type().IsMapType() {
		l.errorf(attr.Expr.Range(), "Invalid wait", `wait is an object such as { min = "2s", max = "10s" }.`)
		return 0, 0
	}
	var min, max time.Duration
	var hasMin, hasMax bool
	for it := v.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		key := k.AsString()
		if key != "min" && key != "max" {
			l.errorf(attr.Expr.Range(), "Invalid wait", `wait has only min and max; %q is not one of them.%s`, key, didYouMean(key, []string{"min", "max"}))
			return 0, 0
		}
		if ev.IsNull() {
			continue
		}
		d, ok := e.durationValue("wait."+key, attr.Expr.Range(), ev)
		if !ok {
			return 0, 0
		}
		if key == "min" {
			min, hasMin = d, true
		} else {
			max, hasMax = d, true
		}
	}
	if hasMin && !hasMax {
		max = 4 * min
	}
	if max < min {
		l.errorf(attr.Expr.Range(), "Invalid wait", "wait.max (%s) must be at least wait.min (%s).", max, min)
		return 0, 0
	}
	return min, max
}

func (l *loader) decodeLeader(e *evaluator, block *hcl.Block, service string) *Leader {
	ld := &Leader{
		Mode:        "standby",
		Tag:         "leader",
		FollowerTag: "follower",
		Key:         "mariposa/leader/" + service,
		SessionTTL:  10 * time.Second,
		LockDelay:   time.Second,
		ChangeMode:  "restart",
	}
	content, diags := bodyContent(block.Body, leaderSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes
	modeOK := true
	if attr, ok := attrs["mode"]; ok {
		if s, ok := e.Enum(attr, "Invalid leader mode", leaderModes); ok {
			ld.Mode = s
		} else {
			modeOK = false
		}
	}
	for _, name := range []string{"tag", "follower_tag"} {
		attr, ok := attrs[name]
		if !ok {
			continue
		}
		s, ok := e.String(attr)
		if !ok {
			continue
		}
		if s == "" {
			l.errorf(attr.Expr.Range(), "Invalid leader tag", "The %s must not be empty.", name)
			continue
		}
		if name == "tag" {
			ld.Tag = s
		} else {
			ld.FollowerTag = s
		}
	}
	if ld.Tag == ld.FollowerTag {
		rng := block.DefRange
		if attr, ok := attrs["follower_tag"]; ok {
			rng = attr.Expr.Range()
		} else if attr, ok := attrs["tag"]; ok {
			rng = attr.Expr.Range()
		}
		l.errorf(rng, "Invalid leader tag", "tag and follower_tag are both %q; DNS could not tell the leader from the others.", ld.Tag)
	}
	if attr, ok := attrs["key"]; ok {
		if s, ok := e.String(attr); ok {
			if s == "" || strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \x00") {
				l.errorf(attr.Expr.Range(), "Invalid leader key", "%q is not a usable Consul KV key: it must be non-empty, without spaces and not start with \"/\".", s)
			} else {
				ld.Key = s
			}
		}
	}
	if attr, ok := attrs["session_ttl"]; ok {
		if d, ok := e.Duration(attr); ok {
			if d < 10*time.Second || d > 24*time.Hour {
				l.errorf(attr.Expr.Range(), "Invalid session_ttl", "Consul accepts session TTLs from 10s to 24h; got %s.", d)
			} else {
				ld.SessionTTL = d
			}
		}
	}
	if attr, ok := attrs["lock_delay"]; ok {
		if d, ok := e.Duration(attr); ok {
			if d > time.Minute {
				l.errorf(attr.Expr.Range(), "Invalid lock_delay", "Consul accepts lock delays up to 60s; got %s.", d)
			} else {
				ld.LockDelay = d
			}
		}
	}
	if attr, ok := attrs["change_mode"]; ok {
		if s, ok := e.Enum(attr, "Invalid change_mode", leaderChangeModes); ok {
			ld.ChangeMode = s
		}
	}
	if attr, ok := attrs["signal"]; ok {
		if sig, ok := e.Signal(attr); ok {
			ld.Signal = sig
		}
	}
	if ld.ChangeMode == "signal" && ld.Signal == 0 {
		ld.Signal = syscall.SIGHUP
	}
	if attr, ok := attrs["signal"]; ok && ld.ChangeMode != "signal" {
		l.warnf(attr.NameRange, "Signal not used",
			`The leader's signal is only sent with change_mode = "signal"; change_mode is %q.`, ld.ChangeMode)
	}
	if ld.Mode == "standby" && modeOK {
		for _, name := range []string{"tag", "follower_tag", "change_mode"} {
			if attr, ok := attrs[name]; ok {
				l.warnf(attr.NameRange, "Not used in standby mode",
					`%s only applies with mode = "tag": in standby mode only the leader runs and is registered.`, name)
			}
		}
	}
	return ld
}

// errorsCause strips the path an *os.PathError repeats.
func errorsCause(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// checkMaxDelay reads max_delay into *maxDelay (which holds the default)
// and, when delay and max_delay are both valid, says so if max_delay is
// below delay: at max_delay if it was written, else at delay (whose raise
// passed the default). starts describes how the delay grows, with a %s
// for delay.
func (l *loader) checkMaxDelay(e *evaluator, attrs hcl.Attributes, delayOK bool, delay time.Duration, maxDelay *time.Duration, starts string) {
	maxOK := true
	if attr, ok := attrs["max_delay"]; ok {
		if d, ok := e.Duration(attr); ok {
			*maxDelay = d
		} else {
			maxOK = false
		}
	}
	if !delayOK || !maxOK || *maxDelay >= delay {
		return
	}
	if attr, ok := attrs["max_delay"]; ok {
		l.errorf(attr.Expr.Range(), "max_delay less than delay",
			starts+" up to max_delay (%s); max_delay must be at least delay.", delay, *maxDelay)
	} else {
		l.errorf(attrs["delay"].Expr.Range(), "max_delay less than delay",
			starts+" up to max_delay, which defaults to %s; raise max_delay too.", delay, *maxDelay)
	}
}
