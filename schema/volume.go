package schema

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// volumeName is what a volume's label may hold: it becomes part of an
// environment variable name, MARIPOSA_VOLUME_<NAME>.
var volumeName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// volumeDecl is a decoded volume with what the checks across the volumes
// of a unit need.
type volumeDecl struct {
	v     *Volume
	block *hcl.Block
	// pathRng is where the path is written: path's value, or the label
	// when path defaults to the name.
	pathRng hcl.Range
	nameOK  bool
	pathOK  bool
}

// memberVolumes reports the volume blocks of a group's member: a volume
// belongs to the slot, which the group's members share.
func (l *loader) memberVolumes(svc, group string, blocks []*hcl.Block) {
	for _, b := range blocks {
		l.errorf(b.DefRange, "Volume on a group member",
			"Service %q is a member of group %q, whose services share the group's slots: a volume belongs to the slot. Declare volume %q on group %q instead; every member's instance sees it.",
			svc, group, b.Labels[0], group)
	}
}

// decodeVolumes decodes the volume blocks of unit u, whose body has the
// arguments attrs, into p (nil when u has no count, which is then an
// error).
func (l *loader) decodeVolumes(e *evaluator, u unit, attrs hcl.Attributes, blocks []*hcl.Block, p *Placement) {
	if len(blocks) == 0 {
		return
	}
	if p == nil {
		what := "A volume belongs"
		if len(blocks) > 1 {
			what = "Volumes belong"
		}
		l.errorf(blocks[0].DefRange, "Volume without count",
			"%s to a slot of a cluster unit, which runs count instances across the nodes started with mariposa run -cluster, and %s has no count. Add count = N to %s (count = 1 for a single instance), or remove the volume blocks.",
			what, u, u)
	}
	names := map[string]hcl.Range{}
	envs := map[string]*volumeDecl{}
	var decls []*volumeDecl
	for _, b := range blocks {
		d := l.decodeVolume(e, u, attrs, b, p)
		name := d.v.Name
		if prev, dup := names[name]; dup {
			l.errorf(b.LabelRanges[0], "Duplicate volume",
				"%s already has a volume %q at %s; volume names are unique within a unit.", u, name, at(prev))
			continue
		}
		names[name] = b.DefRange
		if d.nameOK {
			env := d.v.EnvName()
			if prev, dup := envs[env]; dup {
				l.errorf(b.LabelRanges[0], "Duplicate volume variable",
					"Volume %q would give the instance the same variable, %s, as volume %q at %s: names that differ only in case, or in a dash for an underscore, collide. Rename one of them.",
					name, env, prev.v.Name, at(prev.block.DefRange))
				continue
			}
			envs[env] = d
		}
		if d.pathOK {
			for _, prev := range decls {
				if prev.pathOK && prev.v.Path == d.v.Path {
					l.errorf(d.pathRng, "Duplicate volume path",
						"Volume %q has the same path, %q, as volume %q at %s: each volume is a directory of its own, copied and moved on its own. Give one of them another path.",
						name, d.v.Path, prev.v.Name, at(prev.pathRng))
					break
				}
			}
		}
		decls = append(decls, d)
		if p != nil {
			p.Volumes = append(p.Volumes, d.v)
		}
	}
}

// snapshotOnly explains, for each argument that only applies with
// handoff = "snapshot", what it would do without it.
var snapshotOnly = map[string]string{
	"snapshot":        "no copy of the data is ever taken",
	"restore":         "no copy of the data is ever restored",
	"replicas":        "no copy of the data is ever pushed to other nodes",
	"interval":        "no periodic copy is taken",
	"restore_timeout": "no copy of the data is ever restored",
	"on_missing":      "an instance whose slot moved always starts with an empty volume",
}

func (l *loader) decodeVolume(e *evaluator, u unit, unitAttrs hcl.Attributes, b *hcl.Block, p *Placement) *volumeDecl {
	name := b.Labels[0]
	v := &Volume{
		Name:           name,
		Path:           name,
		Handoff:        HandoffNone,
		Interval:       DefaultVolumeInterval,
		RestoreTimeout: DefaultVolumeRestoreTimeout,
		OnMissing:      OnMissingLatest,
		Pos:            at(b.DefRange),
	}
	d := &volumeDecl{v: v, block: b, pathRng: b.LabelRanges[0]}
	d.nameOK = volumeName.MatchString(name) && len(name) <= maxNameLen
	if !d.nameOK {
		l.errorf(b.LabelRanges[0], "Invalid volume name",
			"%q cannot name a volume: use at most %d letters, digits, underscores or dashes. The instance finds the volume's directory in the environment variable %s<NAME>, the name upper-cased with dashes as underscores, so the name must fit in a variable name.",
			name, maxNameLen, VolumeEnvPrefix)
	}
	d.pathOK = d.nameOK // the default path is the name
	content, diags := bodyContent(b.Body, volumeSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes

	if attr, ok := attrs["path"]; ok {
		d.pathRng = attr.Expr.Range()
		s, ok := e.String(attr)
		d.pathOK = ok
		if ok {
			if problem := volumePathProblem(s, name); problem != "" {
				l.errorf(attr.Expr.Range(), "Invalid volume path", "%s", problem)
				d.pathOK = false
			} else {
				v.Path = s
			}
		}
	}

	handoffAttr, hasHandoff := attrs["handoff"]
	handoffOK := true
	if hasHandoff {
		if s, ok := e.Enum(handoffAttr, "Invalid handoff", volumeHandoffs); ok {
			v.Handoff = s
		} else {
			handoffOK = false
		}
	}
	snapshot := v.Handoff == HandoffSnapshot

	if attr, ok := attrs["snapshot"]; ok {
		v.Snapshot, _ = e.Argv(attr, fmt.Sprintf("The snapshot command of volume %q needs a program to run: leave snapshot out to copy the directory as it is.", name))
	}
	if attr, ok := attrs["restore"]; ok {
		v.Restore, _ = e.Argv(attr, fmt.Sprintf("The restore command of volume %q needs a program to run: leave restore out to use the copy as it is.", name))
	}
	replicasOK := true
	if attr, ok := attrs["replicas"]; ok {
		n, ok := e.Int(attr, math.MinInt64, math.MaxInt64)
		switch {
		case !ok:
			replicasOK = false
		case n < 0 || n > maxSlots:
			l.errorf(attr.Expr.Range(), "Invalid replicas",
				"replicas is how many other nodes receive a periodic copy of volume %q, from 0 (the default: none) to %d; got %d.", name, maxSlots, n)
			replicasOK = false
		default:
			v.Replicas = n
		}
	}
	intervalOK := true
	for _, dd := range []struct {
		name, what, def string
		dst             *time.Duration
	}{
		{"interval", "how often the holder pushes a copy of volume %q to replicas other nodes (with its node, at most this much of the writes is lost)", "5m", &v.Interval},
		{"restore_timeout", "how long the restore of volume %q may take before it counts as a start failure", "10m", &v.RestoreTimeout},
	} {
		attr, ok := attrs[dd.name]
		if !ok {
			continue
		}
		dur, ok := e.Duration(attr)
		if dd.name == "interval" {
			intervalOK = ok && dur > 0
		}
		if !ok {
			continue
		}
		if dur == 0 {
			l.errorf(attr.Expr.Range(), "Invalid "+dd.name,
				"%s is "+dd.what+"; it must be more than zero (the default is %q).", dd.name, name, dd.def)
			continue
		}
		*dd.dst = dur
	}
	if attr, ok := attrs["on_missing"]; ok {
		if s, ok := e.Enum(attr, "Invalid on_missing", volumeOnMissing); ok {
			v.OnMissing = s
		}
	}

	// What only applies when the data moves with the slot.
	if handoffOK && !snapshot {
		given := fmt.Sprintf("handoff is %q", v.Handoff)
		if !hasHandoff {
			given = fmt.Sprintf("handoff is %q, the default", v.Handoff)
		}
		for _, a := range volumeSchema.Attributes {
			attr, ok := attrs[a.Name]
			why := snapshotOnly[a.Name]
			if !ok || why == "" {
				continue
			}
			if a.Name == "replicas" && (!replicasOK || v.Replicas == 0) {
				continue // replicas = 0 is true of every handoff
			}
			l.errorf(attr.NameRange, a.Name+" without snapshot handoff",
				`%s only applies when volume %q moves with its slot, with handoff = "snapshot"; %s, so %s. Set handoff = "snapshot", or remove %s.`,
				a.Name, name, given, why, a.Name)
		}
	}
	if handoffOK && snapshot {
		if attr, ok := attrs["interval"]; ok && intervalOK && replicasOK && v.Replicas == 0 {
			given := "replicas = 0"
			if _, set := attrs["replicas"]; !set {
				given = "replicas is 0, the default"
			}
			l.warnf(attr.NameRange, "interval not used",
				"interval is how often the holder pushes a copy of volume %q to replicas other nodes, and %s: no periodic copy is taken, and only a planned move carries the data. Set replicas = 1 or more, or remove interval.",
				name, given)
		}
		if p != nil && exclusiveFalse(e, unitAttrs) {
			given := "exclusive = false (the default)"
			if _, set := unitAttrs["exclusive"]; set {
				given = "exclusive = false"
			}
			l.errorf(handoffAttr.Expr.Range(), "Snapshot handoff without exclusive",
				`handoff = "snapshot" moves volume %q with its slot, and data can only move once it is stopped: that needs an exclusive slot, whose holder stops its instance when it is cut off from Consul, before another node can take the slot. With %s, a cut-off node would keep writing while the next holder restores an older copy, and one of the two would be lost. Add exclusive = true to %s, or use handoff = "sticky" to keep the data on its node.`,
				name, given, u)
		}
	}
	return d
}

// exclusiveFalse: the unit's exclusive argument is absent, or evaluates to
// false. An invalid one (already reported) is not false.
func exclusiveFalse(e *evaluator, attrs hcl.Attributes) bool {
	attr, ok := attrs["exclusive"]
	if !ok {
		return true
	}
	val, diags := attr.Expr.Value(e.ctx)
	if diags.HasErrors() || !val.IsWhollyKnown() {
		return false
	}
	val, _ = val.UnmarkDeep()
	if val.IsNull() {
		return true
	}
	return val.Type() == cty.Bool && val.False()
}

// Volume paths: the store keeps a slot's volumes side by side in the
// slot's directory (<volume directory>/<unit>/<k>/<path>), with its own
// entries beside them: names starting with ".", and during a restore
// "<path>.restore-<n>" and "<path>.aside".
const (
	maxVolumePath      = 200 // a path component is at most 255 bytes, with the store's suffixes
	volumeAsideSuffix  = ".aside"
	volumeRestoreInfix = ".restore-"
)

var volumePath = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// volumePathProblem returns why s cannot be the path of volume name, or
// "".
func volumePathProblem(s, name string) string {
	const what = "path is the name of the volume's directory in the slot's directory, which mariposa owns, copies and moves"
	switch {
	case s == "":
		return what + "; it cannot be empty. Leave path out to use the volume's name."
	case strings.HasPrefix(s, "/"):
		return fmt.Sprintf("%s: it is relative, and %q is absolute. Write a name such as %q.", what, s, name)
	case strings.Contains(s, "/"):
		hint := ""
		if alt := strings.ReplaceAll(strings.Trim(path.Clean(s), "/"), "/", "-"); volumeDirProblem(alt) == "" {
			hint = fmt.Sprintf(" such as %q", alt)
		}
		return fmt.Sprintf("%s: a volume is one directory of the slot, so path is a single name, without \"/\", and %q is not. Write one name%s.", what, s, hint)
	case s == "." || s == "..":
		return fmt.Sprintf("%s; %q is not the name of a directory in it. Write a name such as %q.", what, s, name)
	}
	if p := volumeDirProblem(s); p != "" {
		return what + "; " + p
	}
	return ""
}

// volumeDirProblem returns why s, one name, cannot name a volume's
// directory, or "".
func volumeDirProblem(s string) string {
	switch {
	case s == "" || s == "." || s == "..":
		return fmt.Sprintf("%q names no directory.", s)
	case len(s) > maxVolumePath:
		return fmt.Sprintf("it is at most %d bytes long, and has %d.", maxVolumePath, len(s))
	case !volumePath.MatchString(s):
		return fmt.Sprintf("%q has characters other than letters, digits, \"-\", \"_\" and \".\".", s)
	case strings.HasPrefix(s, "."):
		return fmt.Sprintf("%q starts with \".\", and those names are mariposa's own (the slot's snapshots and received copies).", s)
	case strings.HasSuffix(s, volumeAsideSuffix) || strings.Contains(s, volumeRestoreInfix):
		return fmt.Sprintf("%q ends in %q or contains %q, the names mariposa gives a volume's directory while it restores one.", s, volumeAsideSuffix, volumeRestoreInfix)
	}
	return ""
}
