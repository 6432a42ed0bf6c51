package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul-template/config"
	dep "github.com/hashicorp/consul-template/dependency"
	ctemplate "github.com/hashicorp/consul-template/template"

	"github.com/mariposa-sh/mariposa/schema"
)

// TemplateEvent says a render changed a file. The file is on disk, complete,
// before the event is visible.
type TemplateEvent struct {
	Template    *schema.Template
	Destination string
}

// templateRunner renders one template: on every change of the data it read, and
// with quiescence after its first render when `wait` is set.
type templateRunner struct {
	sd   *ServiceData
	t    *schema.Template
	name string // destination as the user wrote it, for messages
	ct   *ctemplate.Template
	kick chan struct{}

	used map[string]dep.Dependency // only the run goroutine touches it
	hid  map[string]string         // query -> the value that names it (hideValue); run goroutine only
	// current: the last render executed the template over the data of
	// generation gen (used being what it read) and ended without an error,
	// so a render before any of used changes would do it again for nothing.
	// Only the run goroutine touches them.
	current bool
	gen     uint64

	// failed is set when the template cannot be read or parsed: a
	// permanent error, unlike missing data. Set before run starts.
	failed string

	// Guarded by sd.mu.
	rendered bool
	waiting  string
	err      string
	env      []string
	hash     string // of the last good output
	renders  int    // files written, for tests
	execs    int    // executions of the template, for tests
}

func newTemplateRunner(sd *ServiceData, t *schema.Template, sb *sandbox) *templateRunner {
	r := &templateRunner{sd: sd, t: t, kick: make(chan struct{}, 1), used: map[string]dep.Dependency{}}
	r.name = t.Destination
	if rel, err := filepath.Rel(sb.root, t.Destination); err == nil && !strings.HasPrefix(rel, "..") {
		r.name = rel
	}
	in := &ctemplate.NewTemplateInput{
		Source:      t.Source,
		Contents:    t.Contents,
		Destination: t.Destination,
		ExtFuncMap:  sb.funcs(),
		ReaderFunc:  config.Reader(os.ReadFile),
	}
	ct, err := ctemplate.NewTemplate(in)
	if err != nil {
		r.err = fmt.Sprintf("template %s: %v", r.name, err)
		r.failed = "failed: " + r.err
		return r
	}
	if te := checkTemplate(ct.Contents()); te != nil {
		sep := ":" // "web.conf.tpl:3:15: ..."
		if te.Line == 0 {
			sep = ": "
		}
		r.err = fmt.Sprintf("template %s: %s%s%s", r.name, templateLabel(sd.svc, t), sep, te.Error())
		r.failed = "failed: " + r.err
		return r
	}
	r.ct = ct
	return r
}

// templateLabel names a template's text in messages: its source file
// (relative to the HCL file's directory when inside it), or "contents".
func templateLabel(svc *schema.Service, t *schema.Template) string {
	if t.Source == "" {
		return "contents"
	}
	if rel, err := filepath.Rel(svc.SourceDir, t.Source); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return t.Source
}

func (r *templateRunner) dataChanged() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *templateRunner) run(ctx context.Context) {
	defer func() {
		for k := range r.used {
			r.sd.m.unwatch(r, k)
			r.unhide(k)
		}
	}()
	if r.ct == nil {
		return // the template cannot be read or parsed; its error stays
	}
	wmin, wmax := r.t.WaitMin, r.t.WaitMax
	if wmin > 0 && wmax == 0 {
		wmax = 4 * wmin // consul-template's rule
	}
	if wmax < wmin {
		wmax = wmin
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending bool
	var deadline time.Time

	r.render()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			r.sd.mu.Lock()
			quiet := r.rendered && wmin > 0
			r.sd.mu.Unlock()
			if !quiet {
				r.render()
				continue
			}
			// Quiescence, as consul-template: render once the data has
			// been still for min, but no later than max after the first change.
			now := time.Now()
			if !pending {
				pending, deadline = true, now.Add(wmax)
				timer.Reset(wmin)
			} else if now.Add(wmin).Before(deadline) {
				timer.Reset(wmin)
			} else {
				timer.Reset(max(0, deadline.Sub(now)))
			}
		case <-timer.C:
			pending = false
			r.render()
		}
	}
}

// render executes the template, follows the data it used, and writes the
// file when all data is there and the output changed. It does nothing when
// none of the data the template read has changed since its last render
// (and that render ended well): the output would be the same.
//
// consul-template builds its function map (about 250 functions) and parses
// the text again on every execution, so an execution saved is most of a
// render's CPU.
func (r *templateRunner) render() {
	m := r.sd.m
	if r.current && m.unchangedSince(r.gen, r.used) {
		return
	}
	r.current = false
	var res *ctemplate.ExecuteResult
	var err error
	var gen uint64
	// A pass may reveal new dependencies (a key named by a list's entry);
	// whose data may already be known from other readers: go again then.
	for range 100 {
		// Data delivered from here on may not be in this pass: its
		// gen is above this one.
		gen = m.generation()
		res, err = r.ct.Execute(&ctemplate.ExecuteInput{Brain: m.brain})
		r.sd.mu.Lock()
		r.execs++
		r.sd.mu.Unlock()
		if err != nil {
			break
		}
		if !r.follow(res.Used.List()) {
			break
		}
	}
	var (
		waiting, errMsg string
		out             []byte
		env             []string
	)
	switch {
	case err != nil:
		// Never the error as it is: it may quote the data (redact.go).
		errMsg = fmt.Sprintf("template %s: %s", r.name, execMessage(templateLabel(r.sd.svc, r.t), err))
	case res.Missing.Len() > 0:
		waiting = fmt.Sprintf("waiting: template %s needs %s", r.name, r.describeMissing(res))
	case len(res.Output) > m.opts.MaxOutput:
		errMsg = fmt.Sprintf("template %s: output is %d bytes, over the %s limit", r.name, len(res.Output), size(m.opts.MaxOutput))
	default:
		out = res.Output
		if r.t.Env {
			env, err = parseEnv(out)
			if err != nil {
				errMsg = fmt.Sprintf("template %s: %v", r.name, err)
				out = nil
			}
		}
	}
	changed, fileExisted := false, false
	if out != nil {
		uid, gid, oerr := templateOwner(r.t)
		if oerr != nil {
			err = oerr
		} else {
			fileExisted = fileExists(r.t.Destination)
			changed, err = writeFileOwned(r.t.Destination, out, r.t.Perms, uid, gid)
		}
		if err != nil {
			errMsg = fmt.Sprintf("template %s: write: %v", r.name, err)
		}
	}

	r.sd.mu.Lock()
	before, prevErr := r.rendered, r.err
	notify := r.waiting != waiting || r.err != errMsg
	r.waiting, r.err = waiting, errMsg
	if errMsg == "" && out != nil {
		r.rendered = true
		prevHash := r.hash
		r.hash = outputHash(out)
		notify = notify || !before || !equalStrings(r.env, env)
		r.env = env
		if changed {
			r.renders++
		}
		// An event when the file changed, or when this template's output
		// did although the file already held it: another service on this
		// machine (an instance of the same unit in another slot, or on
		// another node of a test fleet) wrote the same destination first.
		if before && (changed || r.hash != prevHash) || !before && changed && m.opts.AfterUpgrade && fileExisted {
			r.sd.addEvent(TemplateEvent{Template: r.t, Destination: r.t.Destination})
			notify = true
		}
	}
	r.sd.mu.Unlock()
	r.current, r.gen = errMsg == "", gen
	if errMsg != "" && errMsg != prevErr {
		m.log.Warn("template not rendered; the last good file stays", "service", r.sd.svc.Name, "error", errMsg)
	}
	if m.opts.Observe != nil && waiting == "" {
		m.opts.Observe(r.sd.svc.Name, changed, errMsg != "")
	}
	if changed {
		m.log.Debug("rendered", "service", r.sd.svc.Name, "destination", r.t.Destination)
	}
	if notify {
		r.sd.notify()
	}
}

// follow watches what the last pass used and stops watching what it no
// longer uses. It reports whether a newly followed dependency already has
// data, so that another pass would see more.
func (r *templateRunner) follow(used []dep.Dependency) (again bool) {
	m := r.sd.m
	now := make(map[string]dep.Dependency, len(used))
	var vals []string
	for _, d := range used {
		if d.Type() != dep.TypeConsul {
			continue
		}
		k := d.String()
		now[k] = d
		if _, ok := r.used[k]; !ok {
			if vals == nil {
				vals = kvValues(m.brain, used)
			}
			// A query named by a value (key (key "app/next")): the log
			// never shows its name.
			if ok, v := namedByData(depArg(d), vals); ok {
				hideValue(v)
				if r.hid == nil {
					r.hid = map[string]string{}
				}
				r.hid[k] = v
			}
			m.watch(r, d)
			if _, ok := m.recall(d); ok {
				again = true
			}
		}
	}
	for k := range r.used {
		if _, ok := now[k]; !ok {
			m.unwatch(r, k)
			r.unhide(k)
		}
	}
	r.used = now
	return again
}

// unhide drops the hidden value that named query k, if any.
func (r *templateRunner) unhide(k string) {
	if v, ok := r.hid[k]; ok {
		delete(r.hid, k)
		unhideValue(v)
	}
}

// depArg is what a query names: a key, a prefix, a service.
func depArg(d dep.Dependency) string {
	_, arg, _ := strings.Cut(d.String(), "(")
	return strings.TrimSuffix(arg, ")")
}

// describeMissing names the data res waits for, but for names computed
// from values read from Consul (`key (key "app/next")`), which it counts.
func (r *templateRunner) describeMissing(res *ctemplate.ExecuteResult) string {
	vals := kvValues(r.sd.m.brain, res.Used.List())
	var named []dep.Dependency
	hidden := 0
	for _, d := range res.Missing.List() {
		if ok, _ := namedByData(depArg(d), vals); ok {
			hidden++
			continue
		}
		named = append(named, d)
	}
	s := describeAll(named)
	switch {
	case hidden == 0:
	case s == "":
		s = fmt.Sprintf("%d named by data read from Consul (not shown)", hidden)
	default:
		s += fmt.Sprintf(" and %d named by data read from Consul (not shown)", hidden)
	}
	return s
}

// describeAll names missing data for people: `key "app/config"`.
func describeAll(ds []dep.Dependency) string {
	names := make([]string, 0, len(ds))
	seen := map[string]bool{}
	for _, d := range ds {
		n := describe(d)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	if len(names) > 1 {
		return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	return strings.Join(names, "")
}

func describe(d dep.Dependency) string {
	s := d.String()
	kind, arg, hasArg := strings.Cut(s, "(")
	arg = strings.TrimSuffix(arg, ")")
	switch kind {
	case "kv.block", "kv.get":
		return fmt.Sprintf("key %q", arg)
	case "kv.list", "kv.keys":
		return fmt.Sprintf("keys under %q", arg)
	case "health.service", "catalog.service":
		name, _, _ := strings.Cut(arg, "|")
		return fmt.Sprintf("service %q", name)
	case "health.connect":
		name, _, _ := strings.Cut(arg, "|")
		return fmt.Sprintf("connect service %q", name)
	case "catalog.services":
		return "the service list"
	case "catalog.nodes":
		return "the node list"
	case "catalog.node":
		if !hasArg {
			return "this node"
		}
		return fmt.Sprintf("node %q", arg)
	case "catalog.datacenters":
		return "the datacenter list"
	}
	return s
}

// parseEnv reads KEY=VALUE lines; blank lines and # comments are skipped,
// and one pair of quotes around a value is removed.
func parseEnv(b []byte) ([]string, error) {
	var env []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		v = strings.TrimSpace(v)
		if !ok || !validEnvName(k) {
			// Never the line: it holds what the template wrote.
			return nil, envLineError(i+1, ok)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// outputHash names a rendered output: the first 16 bytes of its SHA-256, in
// hex.
func outputHash(out []byte) string {
	h := sha256.Sum256(out)
	return hex.EncodeToString(h[:16])
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
