package schema

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// validate runs the checks that span services and files.
func (l *loader) validate() {
	names := map[string]*serviceDecl{}
	ids := map[string]hcl.Range{}
	dests := map[string]hcl.Range{}
	keys := map[string]hcl.Range{}
	for _, d := range l.decls {
		svc := d.svc
		if prev, dup := names[svc.Name]; dup {
			l.errorf(d.block.DefRange, "Duplicate service name",
				"A service named %q is already declared at %s; service names are unique across all loaded files.",
				svc.Name, at(prev.block.DefRange))
		} else {
			names[svc.Name] = d
		}
		if d.id != nil {
			if prev, dup := ids[svc.ID]; dup {
				l.errorf(*d.id, "Duplicate service ID", "The service ID %q is already used at %s.", svc.ID, at(prev))
			} else {
				ids[svc.ID] = *d.id
			}
		}
		for _, t := range svc.Templates {
			rng := d.tmpls[t]
			if prev, dup := dests[t.Destination]; dup {
				l.errorf(rng, "Duplicate template destination",
					"Another template already writes %s (at %s); each file has one writer.", t.Destination, at(prev))
			} else {
				dests[t.Destination] = rng
			}
		}
		if svc.Leader != nil && d.lead != nil {
			if prev, dup := keys[svc.Leader.Key]; dup {
				l.errorf(*d.lead, "Duplicate leader key",
					"The leader key %q is already used by the leader block at %s; two services sharing a lock would elect one leader between them. Set key on one of them.",
					svc.Leader.Key, at(prev))
			} else {
				keys[svc.Leader.Key] = *d.lead
			}
		}
	}
	l.findCycles(names)
}

// findCycles reports each dependency cycle among loaded services once, at
// the depends_on block that closes it.
func (l *loader) findCycles(names map[string]*serviceDecl) {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	reported := map[string]bool{}
	var visit func(d *serviceDecl)
	visit = func(d *serviceDecl) {
		name := d.svc.Name
		color[name] = grey
		stack = append(stack, name)
		for _, dep := range d.svc.Depends {
			next, ok := names[dep.Service]
			if !ok {
				continue
			}
			switch color[dep.Service] {
			case white:
				visit(next)
			case grey:
				start := 0
				for i, n := range stack {
					if n == dep.Service {
						start = i
					}
				}
				cycle := append(append([]string{}, stack[start:]...), dep.Service)
				key := canonicalCycle(cycle)
				if reported[key] {
					continue
				}
				reported[key] = true
				l.errorf(d.deps[dep], "Dependency cycle",
					"The services %s wait for each other, so none of them could ever start. Remove one of these depends_on blocks.",
					strings.Join(cycle, " -> "))
			}
		}
		stack = stack[:len(stack)-1]
		color[name] = black
	}
	for _, d := range l.decls {
		if names[d.svc.Name] == d && color[d.svc.Name] == white {
			visit(d)
		}
	}
}

// canonicalCycle names a cycle independently of where it was entered.
func canonicalCycle(cycle []string) string {
	ring := cycle[:len(cycle)-1]
	best := 0
	for i := range ring {
		if ring[i] < ring[best] {
			best = i
		}
	}
	rot := append(append([]string{}, ring[best:]...), ring[:best]...)
	return strings.Join(rot, "\x00")
}

// sortDiags orders diagnostics by file (load order) and position, keeping
// those without a position first.
func (l *loader) sortDiags() {
	fileIdx := map[string]int{}
	for i, name := range l.order {
		fileIdx[name] = i
	}
	sort.SliceStable(l.diags, func(a, b int) bool {
		da, db := l.diags[a].Subject, l.diags[b].Subject
		switch {
		case da == nil || db == nil:
			return da == nil && db != nil
		case da.Filename != db.Filename:
			return fileIdx[da.Filename] < fileIdx[db.Filename]
		default:
			return da.Start.Byte < db.Start.Byte
		}
	})
}

// at renders a position the way Diagnostics.Error does: "file:line:col".
func at(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// maxDiagnostics bounds what one load reports. Real configurations stay far
// below it; a generated or corrupted file could otherwise produce so many
// that printing them (each rescans its file for the source line) takes
// minutes.
const maxDiagnostics = 200

func (l *loader) capDiags() {
	if len(l.diags) <= maxDiagnostics {
		return
	}
	rest := l.diags[maxDiagnostics-1:]
	errs, warns := 0, 0
	for _, d := range rest {
		if d.Severity == hcl.DiagError {
			errs++
		} else {
			warns++
		}
	}
	sev := hcl.DiagWarning
	if errs > 0 {
		sev = hcl.DiagError
	}
	l.diags = append(l.diags[:maxDiagnostics-1:maxDiagnostics-1], &hcl.Diagnostic{
		Severity: sev,
		Summary:  "Too many problems",
		Detail: fmt.Sprintf("%d more errors and %d more warnings are not shown; fix the ones above and validate again.",
			errs, warns),
		Subject: rest[0].Subject,
	})
}
