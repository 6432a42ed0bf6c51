package schema

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// parsed is a source with its syntax tree and top-level content.
type parsed struct {
	source
	file    *hcl.File
	dir     string // absolute directory of the file
	content *hcl.BodyContent
}

// loader holds the state of one Load.
type loader struct {
	diags     hcl.Diagnostics
	files     map[string]*hcl.File
	opts      LoadOptions
	environ   []string
	vars      []*variable
	varByName map[string]*variable
	varValues map[string]cty.Value

	cfg    *Config
	decls  []*serviceDecl
	groups map[string]hcl.Range
	order  []string // display names of the files, in load order
}

// serviceDecl remembers where a service and its parts were declared, for
// the checks that span services.
type serviceDecl struct {
	svc   *Service
	block *hcl.Block
	deps  map[*Dependency]hcl.Range
	tmpls map[*Template]hcl.Range
	id    *hcl.Range // set when id is given explicitly
	lead  *hcl.Range
	user  *hcl.Range // where user, or else group, was written
}

func (l *loader) errorf(subject hcl.Range, summary, format string, args ...any) {
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

func (l *loader) warnf(subject hcl.Range, summary, format string, args ...any) {
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

func (l *loader) result() *Diagnostics {
	l.sortDiags()
	l.capDiags()
	return &Diagnostics{diags: l.diags, files: l.files}
}

// load is the whole pipeline over in-memory sources: parse every file, read
// variables, decode services and groups, then validate across services.
func load(srcs []source, opts LoadOptions) (*Config, *Diagnostics) {
	l := &loader{
		files:     map[string]*hcl.File{},
		opts:      opts,
		environ:   opts.Environ,
		varByName: map[string]*variable{},
		groups:    map[string]hcl.Range{},
		cfg:       &Config{},
	}
	if l.environ == nil {
		l.environ = os.Environ()
	}
	var ps []*parsed
	for _, src := range srcs {
		f, diags := parseFile(src)
		l.diags = append(l.diags, diags...)
		if f != nil {
			l.files[src.name] = f
		} else {
			l.files[src.name] = &hcl.File{Bytes: src.data}
		}
		l.order = append(l.order, src.name)
		abs := src.abs
		if abs == "" {
			abs, _ = filepath.Abs(src.name)
		}
		src.abs = abs
		ps = append(ps, &parsed{source: src, file: f, dir: filepath.Dir(abs)})
		l.cfg.Files = append(l.cfg.Files, abs)
	}
	// Syntax errors make everything after them guesswork: stop here.
	if l.diags.HasErrors() {
		return nil, l.result()
	}
	for _, p := range ps {
		content, diags := bodyContent(p.file.Body, rootSchema)
		l.diags = append(l.diags, diags...)
		p.content = content
	}
	for _, p := range ps {
		for _, block := range p.content.Blocks {
			if block.Type != "variable" {
				continue
			}
			v := l.decodeVariable(block, p)
			if v == nil {
				continue
			}
			if prev, dup := l.varByName[v.name]; dup {
				l.errorf(block.DefRange, "Duplicate variable",
					"A variable named %q is already declared at %s; variable names are unique across all loaded files.", v.name, at(prev.declRange))
				continue
			}
			l.varByName[v.name] = v
			l.vars = append(l.vars, v)
		}
	}
	l.resolveVariables(opts)
	for _, p := range ps {
		e := l.evaluatorFor(p, l.varValues)
		for _, block := range p.content.Blocks {
			switch block.Type {
			case "service":
				l.decodeService(e, block, p, "", nil)
			case "group":
				l.decodeGroup(e, block, p)
			}
		}
		l.diags = append(l.diags, e.diags...)
	}
	l.validate()
	if l.diags.HasErrors() {
		return nil, l.result()
	}
	return l.cfg, l.result()
}

// evaluatorFor builds the evaluation context of one file: var.* and the
// functions, with file() confined to the file's directory.
func (l *loader) evaluatorFor(p *parsed, vals map[string]cty.Value) *evaluator {
	ctx := &hcl.EvalContext{Functions: fileFunctions(p.dir, l.environ)}
	e := &evaluator{ctx: ctx, declared: map[string]bool{}}
	if vals != nil {
		ctx.Variables = map[string]cty.Value{"var": cty.ObjectVal(vals)}
		for _, v := range l.vars {
			e.declared[v.name] = true
			e.varNames = append(e.varNames, v.name)
		}
	}
	return e
}

// validName is what Consul's DNS interface can serve: letters, digits and
// dashes (underscores tolerated), starting with a letter or digit.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

const maxNameLen = 63 // one DNS label

func (l *loader) checkName(kind, name string, rng hcl.Range) bool {
	if !validName.MatchString(name) || len(name) > maxNameLen {
		l.errorf(rng, "Invalid "+kind+" name",
			"%q is not a valid %s name: use at most %d letters, digits, dashes or underscores, starting with a letter or digit, so that Consul DNS can serve it.",
			name, kind, maxNameLen)
		return false
	}
	return true
}

func (l *loader) decodeGroup(e *evaluator, block *hcl.Block, p *parsed) {
	name := block.Labels[0]
	l.checkName("group", name, block.LabelRanges[0])
	if prev, dup := l.groups[name]; dup {
		l.errorf(block.DefRange, "Duplicate group name",
			"A group named %q is already declared at %s; group names are unique across all loaded files.", name, at(prev))
	} else {
		l.groups[name] = block.DefRange
	}
	content, diags := bodyContent(block.Body, groupSchema)
	l.diags = append(l.diags, diags...)
	g := &Group{Name: name}
	u := unit{kind: "group", name: name}
	var members, placement, volumes []*hcl.Block
	for _, b := range content.Blocks {
		switch {
		case b.Type == "service":
			members = append(members, b)
			u.members = append(u.members, b.Labels[0])
		case b.Type == "volume":
			volumes = append(volumes, b)
		case isPlacementBlock(b.Type):
			placement = append(placement, b)
		}
	}
	// The group's placement is one value that every member shares, and
	// so are its volumes, which belong to the group's slots.
	g.Placement = l.decodePlacement(e, u, content.Attributes, placement)
	l.decodeVolumes(e, u, content.Attributes, volumes, g.Placement)
	for _, b := range members {
		if svc := l.decodeService(e, b, p, name, g.Placement); svc != nil {
			g.Services = append(g.Services, svc.Name)
		}
	}
	if len(g.Services) == 0 && !diags.HasErrors() {
		l.errorf(block.DefRange, "Empty group", "Group %q has no service blocks; a group holds the services that run together.", name)
	}
	l.cfg.Groups = append(l.cfg.Groups, g)
}

const commandHint = ` The command is an argv list such as ["python3", "-m", "http.server"]; there is no implicit shell, write ["/bin/sh", "-c", "..."] to use one.`

// reservedMeta are meta keys mariposa sets itself.
var reservedMeta = map[string]string{
	"managed-by": `mariposa sets "managed-by" itself`,
	"version":    `use the service's "version" argument instead`,
}

var metaKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// envName is a portable environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// decodeService decodes a service block; group is the enclosing group's
// name and groupPlacement its placement (nil without a count), or "" and nil.
func (l *loader) decodeService(e *evaluator, block *hcl.Block, p *parsed, group string, groupPlacement *Placement) *Service {
	name := block.Labels[0]
	svc := &Service{Name: name, Group: group, SourceFile: p.abs, SourceDir: p.dir}
	decl := &serviceDecl{svc: svc, block: block, deps: map[*Dependency]hcl.Range{}, tmpls: map[*Template]hcl.Range{}}
	if l.checkName("service", name, block.LabelRanges[0]) && name == "mariposa" {
		l.errorf(block.LabelRanges[0], "Reserved service name",
			`Every mariposa registers itself in Consul as the service "mariposa"; choose another name.`)
	}
	content, diags := bodyContent(block.Body, serviceSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes

	if attr, ok := attrs["command"]; ok {
		svc.Command, _ = e.Argv(attr, fmt.Sprintf("Service %q needs a command to run: a list whose first element is the program.", name))
	}
	if attr, ok := attrs["id"]; ok {
		if id, ok := e.String(attr); ok {
			if id == "" || strings.ContainsAny(id, "/ \t\n") {
				l.errorf(attr.Expr.Range(), "Invalid service ID", "%q is not a usable Consul service ID: it must be non-empty, without spaces or slashes.", id)
			} else {
				svc.ID = id
				rng := attr.Expr.Range()
				decl.id = &rng
			}
		}
	}
	if attr, ok := attrs["dir"]; ok {
		if dir, ok := e.String(attr); ok && dir != "" {
			if strings.ContainsRune(dir, 0) {
				l.errorf(attr.Expr.Range(), "Invalid directory", "The directory contains a NUL byte.")
			} else {
				if !filepath.IsAbs(dir) {
					dir = filepath.Join(p.dir, dir)
				}
				svc.Dir = filepath.Clean(dir)
			}
		}
	}
	if attr, ok := attrs["env"]; ok {
		if env, ok := e.StringMap(attr); ok {
			for _, k := range sortedKeys(env) {
				if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(env[k], 0) {
					l.errorf(attr.Expr.Range(), "Invalid environment variable",
						"%q cannot be set in a process environment: names must be non-empty without \"=\", and neither name nor value may contain a NUL byte.", k)
					env = nil
					break
				}
			}
			svc.Env = env
		}
	}
	if attr, ok := attrs["port"]; ok {
		if port, ok := e.Int(attr, math.MinInt64, math.MaxInt64); ok {
			if port < 0 || port > 65535 {
				l.errorf(attr.Expr.Range(), "Port out of range", "The port must be between 0 and 65535 (0 means no port), got %d.", port)
			} else {
				svc.Port = port
			}
		}
	}
	if attr, ok := attrs["address"]; ok {
		svc.Address, _ = e.String(attr)
	}
	if attr, ok := attrs["tags"]; ok {
		svc.Tags, _ = e.StringList(attr, "")
	}
	if attr, ok := attrs["meta"]; ok {
		if meta, ok := e.StringMap(attr); ok && l.checkMeta(attr, meta) {
			svc.Meta = meta
		}
	}
	if attr, ok := attrs["version"]; ok {
		svc.Version, _ = e.String(attr)
	}
	if attr, ok := attrs["user"]; ok {
		svc.User, _ = l.userName(e, attr, "user")
		decl.user = attr.Expr.Range().Ptr()
	}
	if attr, ok := attrs["group"]; ok {
		svc.UserGroup, _ = l.userName(e, attr, "group")
		if decl.user == nil {
			decl.user = attr.Expr.Range().Ptr()
		}
	}

	// Singleton blocks are decoded after the loop: restart's defaults depend
	// on whether the service has checks.
	var restart, leader, stop, resources, limits *hcl.Block
	single := func(b *hcl.Block, slot **hcl.Block) {
		if *slot != nil {
			l.errorf(b.DefRange, "Duplicate "+b.Type+" block",
				"Service %q already has a %s block at %s; there can be only one.", name, b.Type, at((*slot).DefRange))
			return
		}
		*slot = b
	}
	var placement, volumes []*hcl.Block
	checkNames := map[string]hcl.Range{}
	depNames := map[string]hcl.Range{}
	prefixes := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		switch b.Type {
		case "check":
			c := l.decodeCheck(e, b, svc.Port)
			if prev, dup := checkNames[c.Name]; dup {
				l.errorf(b.LabelRanges[0], "Duplicate check name",
					"Service %q already has a check named %q at %s; check names are unique within a service.", name, c.Name, at(prev))
				continue
			}
			checkNames[c.Name] = b.DefRange
			svc.Checks = append(svc.Checks, c)
		case "depends_on":
			d := l.decodeDependency(e, b)
			if prev, dup := depNames[d.Name]; dup {
				l.errorf(b.LabelRanges[0], "Duplicate dependency",
					"Service %q already has a depends_on %q block at %s.", name, d.Name, at(prev))
				continue
			}
			depNames[d.Name] = b.DefRange
			if prev, dup := prefixes[d.EnvPrefix]; dup && d.EnvPrefix != "" {
				l.errorf(b.DefRange, "Duplicate dependency env prefix",
					"The dependency %q would set the same %s_* variables as the one at %s; set env_prefix on one of them.", d.Name, d.EnvPrefix, at(prev))
			}
			prefixes[d.EnvPrefix] = b.DefRange
			svc.Depends = append(svc.Depends, d)
			decl.deps[d] = b.DefRange
		case "template":
			if t, rng := l.decodeTemplate(e, b, svc, p); t != nil {
				svc.Templates = append(svc.Templates, t)
				decl.tmpls[t] = rng
			}
		case "restart":
			single(b, &restart)
		case "leader":
			single(b, &leader)
		case "stop":
			single(b, &stop)
		case "resources":
			single(b, &resources)
		case "limits":
			single(b, &limits)
		case "volume":
			volumes = append(volumes, b)
		default:
			if isPlacementBlock(b.Type) {
				placement = append(placement, b)
			}
		}
	}
	if group != "" {
		l.memberPlacement(name, group, attrs, placement)
		l.memberVolumes(name, group, volumes)
		svc.Placement = groupPlacement
	} else {
		u := unit{kind: "service", name: name, members: []string{name}}
		svc.Placement = l.decodePlacement(e, u, attrs, placement)
		l.decodeVolumes(e, u, attrs, volumes, svc.Placement)
	}
	if svc.Placement != nil {
		l.clusterService(svc, decl, leader)
	}
	svc.Restart = l.decodeRestart(e, restart, len(svc.Checks) > 0, svc)
	if leader != nil {
		svc.Leader = l.decodeLeader(e, leader, name)
		decl.lead = leader.DefRange.Ptr()
	}
	svc.Stop = l.decodeStop(e, stop)
	svc.Resources = l.decodeResources(e, resources)
	svc.Limits = l.decodeLimits(e, limits)
	if attr, ok := attrs["umask"]; ok {
		if m, ok := e.Perms(attr); ok {
			svc.Umask = &m
		}
	}
	svc.NoNewPrivs = svc.User != "" || svc.UserGroup != ""
	if attr, ok := attrs["no_new_privs"]; ok {
		if b, ok := e.Bool(attr); ok {
			svc.NoNewPrivs = b
		}
	}
	for _, t := range svc.Templates {
		if t.User == "" && t.Group == "" {
			t.User, t.Group = svc.User, svc.UserGroup
		}
	}
	if l.opts.CheckHost {
		l.checkHost(svc, attrs["command"], attrs["dir"])
	}
	l.checkUsers(svc, decl)

	l.cfg.Services = append(l.cfg.Services, svc)
	l.decls = append(l.decls, decl)
	return svc
}

// clusterService reports what a service in slots cannot have: a leader
// block, and an explicit ID.
func (l *loader) clusterService(svc *Service, decl *serviceDecl, leader *hcl.Block) {
	counted := fmt.Sprintf("Service %q has count = %d", svc.Name, svc.Placement.Count)
	where := ""
	if svc.Group != "" {
		counted = fmt.Sprintf("Service %q is a member of group %q, which has count = %d", svc.Name, svc.Group, svc.Placement.Count)
		where = fmt.Sprintf(" on group %q", svc.Group)
	}
	if leader != nil {
		l.errorf(leader.DefRange, "Leader with count",
			"%s: each of its instances holds a slot, which is already a Consul lock held by one node, so there is nothing left to elect. For a single active instance, remove the leader block and set count = 1 and exclusive = true%s.",
			counted, where)
	}
	if decl.id != nil {
		l.errorf(*decl.id, "Service ID with count",
			"%s: mariposa derives the Consul service ID of each instance from its slot, so that two instances never share one. Remove id.", counted)
	}
}

// checkMeta applies Consul's rules for service meta, plus mariposa's own keys.
func (l *loader) checkMeta(attr *hcl.Attribute, meta map[string]string) bool {
	ok := true
	rng := attr.Expr.Range()
	if len(meta) > 62 {
		l.errorf(rng, "Too many meta keys", "Consul allows 64 meta keys per service and mariposa uses 2; got %d.", len(meta))
		ok = false
	}
	for _, k := range sortedKeys(meta) {
		switch {
		case reservedMeta[k] != "":
			l.errorf(rng, "Reserved meta key", "The meta key %q is reserved: %s.", k, reservedMeta[k])
			ok = false
		case !metaKey.MatchString(k) || len(k) > 128:
			l.errorf(rng, "Invalid meta key", "Consul accepts meta keys of up to 128 letters, digits, dashes and underscores; %q is not one.", k)
			ok = false
		case strings.HasPrefix(k, "consul-"):
			l.errorf(rng, "Invalid meta key", "The prefix \"consul-\" is reserved by Consul; rename %q.", k)
			ok = false
		case len(meta[k]) > 512:
			l.errorf(rng, "Invalid meta value", "Consul accepts meta values of up to 512 bytes; the value of %q has %d.", k, len(meta[k]))
			ok = false
		}
	}
	return ok
}

func (l *loader) decodeStop(e *evaluator, block *hcl.Block) Stop {
	s := Stop{Signal: syscall.SIGTERM, Timeout: 10 * time.Second}
	if block == nil {
		return s
	}
	content, diags := bodyContent(block.Body, stopSchema)
	l.diags = append(l.diags, diags...)
	if attr, ok := content.Attributes["signal"]; ok {
		if sig, ok := e.Signal(attr); ok {
			s.Signal = sig
		}
	}
	if attr, ok := content.Attributes["timeout"]; ok {
		if d, ok := e.Duration(attr); ok {
			s.Timeout = d
		}
	}
	if attr, ok := content.Attributes["drain"]; ok {
		s.Drain, _ = e.Duration(attr)
	}
	return s
}

// decodeResources decodes a resources block (nil without one).
func (l *loader) decodeResources(e *evaluator, block *hcl.Block) *Resources {
	if block == nil {
		return nil
	}
	content, diags := bodyContent(block.Body, resourcesSchema)
	l.diags = append(l.diags, diags...)
	r := &Resources{}
	attrs := content.Attributes
	if attr, ok := attrs["cpu"]; ok {
		r.CPU, _ = e.Int(attr, 1, 1<<20)
	}
	if attr, ok := attrs["memory"]; ok {
		r.Memory, _ = e.Int(attr, 4, 1<<30)
	}
	if attr, ok := attrs["memory_max"]; ok {
		r.MemoryMax, _ = e.Int(attr, 4, 1<<30)
		if r.MemoryMax > 0 && r.Memory > r.MemoryMax {
			l.errorf(attr.Expr.Range(), "memory_max below memory",
				"memory_max (%d MiB) is the hard limit and memory (%d MiB) the reservation: the limit cannot be below the reservation.", r.MemoryMax, r.Memory)
		}
	}
	if attr, ok := attrs["pids"]; ok {
		r.Pids, _ = e.Int(attr, 1, 1<<22)
	}
	if *r == (Resources{}) {
		return nil
	}
	return r
}

// decodeLimits decodes a limits block (nil without one).
func (l *loader) decodeLimits(e *evaluator, block *hcl.Block) *Limits {
	if block == nil {
		return nil
	}
	content, diags := bodyContent(block.Body, limitsSchema)
	l.diags = append(l.diags, diags...)
	lim := &Limits{}
	for name, dst := range map[string]**uint64{"nofile": &lim.NOFile, "nproc": &lim.NProc, "core": &lim.Core} {
		if attr, ok := content.Attributes[name]; ok {
			if n, ok := e.Int(attr, 0, math.MaxInt64); ok {
				v := uint64(n)
				*dst = &v
			}
		}
	}
	if *lim == (Limits{}) {
		return nil
	}
	return lim
}

// userName decodes a user or group: a name or a numeric id.
func (l *loader) userName(e *evaluator, attr *hcl.Attribute, what string) (string, bool) {
	v, ok := e.String(attr)
	if !ok {
		return "", false
	}
	if v == "" || strings.ContainsAny(v, ":/ \t\n\x00") || strings.HasPrefix(v, "-") {
		l.errorf(attr.Expr.Range(), "Invalid "+what,
			"%q is not a %s: give a name such as \"postgres\" or a numeric id such as 70.", v, what)
		return "", false
	}
	return v, true
}

// checkUsers reports a user or group this mariposa cannot switch to, or
// that this machine does not know: errors when the files are loaded to run
// (LoadOptions.Users.Strict), warnings otherwise (files may be validated
// elsewhere than where they run).
func (l *loader) checkUsers(svc *Service, decl *serviceDecl) {
	u := l.opts.Users
	if u == nil || decl.user == nil || (svc.User == "" && svc.UserGroup == "") {
		return
	}
	report := l.warnf
	if u.Strict {
		report = l.errorf
	}
	rng := *decl.user
	who := fmt.Sprintf("user %q", svc.User)
	switch {
	case svc.User == "":
		who = fmt.Sprintf("group %q", svc.UserGroup)
	case svc.UserGroup != "":
		who += fmt.Sprintf(" and group %q", svc.UserGroup)
	}
	if u.CanSwitch != nil {
		if err := u.CanSwitch(); err != nil {
			report(rng, "Cannot switch users",
				"Service %q runs as %s, but %v: start mariposa as root (the shipped systemd unit does), or remove user and group.",
				svc.Name, who, err)
			return
		}
	}
	if u.Resolve != nil {
		if err := u.Resolve(svc.User, svc.UserGroup); err != nil {
			report(rng, "Unknown user or group", "Service %q cannot run as %s on this machine: %v.", svc.Name, who, err)
		}
	}
}
