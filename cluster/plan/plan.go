// Package plan computes what deploying a spec would change (mariposa plan):
// per unit, the attributes that differ from the desired spec, the slots
// added and removed, which instances would be replaced and how the update
// block rolls them; and its text. Pure: two specs in, a Plan out, no
// Consul (cluster.DesiredSpec reads the current spec).
package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

// Plan is what deploying a spec would change (mariposa plan): per unit of
// the deployment, the attributes that differ from the desired spec, the
// slots added and removed, and which instances would be replaced. NewPlan
// computes it from two specs, without Consul; cluster.DesiredSpec reads
// the current one.
type Plan struct {
	Deployment string `json:"deployment"`
	// Current is the desired spec now; nil when the deployment has none.
	Current *SpecRef `json:"current"`
	Next    NextSpec `json:"next"`
	// Changes: deploy would write a new spec (the hashes differ).
	Changes  bool       `json:"changes"`
	Units    []UnitPlan `json:"units"`
	Warnings []string   `json:"warnings"`
}

// SpecRef names a stored spec.
type SpecRef struct {
	N    uint64 `json:"n"`
	Hash string `json:"hash"`
}

// NextSpec is the plan of record: the reified spec deploy would write, as
// spec N (the current N when nothing changes).
type NextSpec struct {
	N    uint64     `json:"n"`
	Hash string     `json:"hash"`
	Spec SpecRecord `json:"spec"`
}

// SpecRecord is a spec as stored, before deploy stamps who and when.
type SpecRecord struct {
	Name     string            `json:"name"`
	N        uint64            `json:"n"`
	Hash     string            `json:"hash"`
	Services []*schema.Service `json:"services"`
	Groups   []*schema.Group   `json:"groups,omitempty"`
}

// What happens to a unit.
const (
	ChangeAdd    = "add"
	ChangeRemove = "remove"
	ChangeChange = "change"
	ChangeNone   = "none"
)

// Which of a unit's instances a deploy replaces.
const (
	ReplaceNone = "none"
	ReplaceAll  = "all"
)

// UnitPlan is what deploying does to one unit (a service with a count, or
// a group with one).
type UnitPlan struct {
	Unit   string `json:"unit"`
	Change string `json:"change"`
	// CountFrom and CountTo are the unit's count before and after (0 for a
	// unit added or removed).
	CountFrom int        `json:"count_from"`
	CountTo   int        `json:"count_to"`
	Diffs     []AttrDiff `json:"diffs"`
	// SlotsAdded is how many slots start; SlotsRemoved names the slots
	// released (the highest ones on a scale-down), whose instances stop.
	SlotsAdded   int      `json:"slots_added"`
	SlotsRemoved []string `json:"slots_removed"`
	// Replace is "all" when a changed service definition (anything but
	// placement) replaces the instances in every slot that stays, as
	// Rollout says (rolling, with canaries, or all at once).
	Replace string `json:"replace"`
	// ReplaceServices are the services whose instances are replaced (for a
	// group, the changed members; the others keep running).
	ReplaceServices []string `json:"replace_services,omitempty"`
	// StartServices and StopServices are group members added and removed:
	// they start, or stop, in every slot.
	StartServices []string `json:"start_services,omitempty"`
	StopServices  []string `json:"stop_services,omitempty"`
	// Rollout is what the unit's update block makes of a replacement (set
	// when Replace is "all"): batches of max_parallel, after canaries when
	// the block has them, or all at once with max_parallel = 0.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Rollout is a replacement under the new spec's update block.
type Rollout struct {
	// MaxParallel is how many slots update at once; 0 is all at once.
	MaxParallel int `json:"max_parallel"`
	// Canary slots update first and the rest wait for a promotion (by
	// hand, or AutoPromote once the canaries are healthy).
	Canary      int  `json:"canary"`
	AutoPromote bool `json:"auto_promote"`
	// Batches is how many rounds of MaxParallel the slots after the
	// canaries take.
	Batches int `json:"batches"`
}

// AttrDiff is one attribute that differs. Path reads as the files do:
// "api.env.MODE", `api.check "http".interval`, "web.app.command" (a group
// member). From is nil for an attribute added, To for one removed. Values
// are JSON values; durations read "10s", signals "SIGHUP", file modes
// "0644".
type AttrDiff struct {
	Path string `json:"path"`
	From any    `json:"from"`
	To   any    `json:"to"`
	// Placement: the attribute is the unit's placement (count, constraint,
	// affinity, spread, max_per_node, exclusive, stop_after, reschedule),
	// which no running instance depends on.
	Placement bool `json:"placement,omitempty"`
}

// NewPlan compares next (a reified spec, as Reify returns it) with
// current (the desired spec, or nil for a new deployment).
func NewPlan(current, next *cluster.Spec) Plan {
	p := Plan{Deployment: next.Name, Units: []UnitPlan{}, Warnings: []string{}}
	p.Next = NextSpec{N: 1, Hash: next.Hash}
	if current != nil {
		p.Current = &SpecRef{N: current.N, Hash: current.Hash}
		p.Next.N = current.N
		if current.Hash != next.Hash {
			p.Next.N++
		}
	}
	p.Changes = current == nil || current.Hash != next.Hash
	p.Next.Spec = SpecRecord{Name: next.Name, N: p.Next.N, Hash: next.Hash, Services: next.Services, Groups: next.Groups}
	if p.Next.Spec.Services == nil {
		p.Next.Spec.Services = []*schema.Service{}
	}

	var curUnits []cluster.UnitSpec
	if current != nil {
		curUnits = current.Units()
	}
	nextUnits := next.Units()
	cur, nxt := map[string]cluster.UnitSpec{}, map[string]cluster.UnitSpec{}
	var curNames, nextNames []string
	for _, u := range curUnits {
		cur[u.Unit.Name] = u
		curNames = append(curNames, u.Unit.Name)
	}
	for _, u := range nextUnits {
		nxt[u.Unit.Name] = u
		nextNames = append(nextNames, u.Unit.Name)
	}
	for _, name := range mergeKeys(curNames, nextNames) {
		c, inCur := cur[name]
		n, inNext := nxt[name]
		switch {
		case !inCur:
			p.Units = append(p.Units, addedUnit(n))
		case !inNext:
			p.Units = append(p.Units, removedUnit(c))
		default:
			p.Units = append(p.Units, changedUnit(c, n))
		}
	}
	return p
}

func addedUnit(u cluster.UnitSpec) UnitPlan {
	n := count(u)
	return UnitPlan{Unit: u.Unit.Name, Change: ChangeAdd, CountTo: n, Diffs: []AttrDiff{},
		SlotsAdded: n, SlotsRemoved: []string{}, Replace: ReplaceNone}
}

func removedUnit(u cluster.UnitSpec) UnitPlan {
	n := count(u)
	return UnitPlan{Unit: u.Unit.Name, Change: ChangeRemove, CountFrom: n, Diffs: []AttrDiff{},
		SlotsRemoved: slotNames(u.Unit.Name, 0, n), Replace: ReplaceNone}
}

func changedUnit(c, n cluster.UnitSpec) UnitPlan {
	up := UnitPlan{Unit: n.Unit.Name, Change: ChangeNone, CountFrom: count(c), CountTo: count(n),
		Diffs: []AttrDiff{}, SlotsRemoved: []string{}, Replace: ReplaceNone}
	a, b := unitTree(c), unitTree(n)
	changed := map[string]bool{} // services whose definition differs
	for _, key := range mergeKeys(a.keys, b.keys) {
		av, bv := a.vals[key], b.vals[key]
		tag := b.tags[key]
		if bv == nil {
			tag = a.tags[key]
		}
		path := n.Unit.Name + "." + key
		diffValue(path, av, bv, func(d AttrDiff) {
			d.Placement = tag == tagPlacement
			up.Diffs = append(up.Diffs, d)
			switch {
			case tag == tagMember && av == nil:
				up.StartServices = append(up.StartServices, a.member(key, b))
			case tag == tagMember && bv == nil:
				up.StopServices = append(up.StopServices, a.member(key, a))
			case tag == tagMember:
				changed[a.member(key, b)] = true
			case tag == "":
				changed[n.Unit.Name] = true
			}
		})
	}
	if len(up.Diffs) > 0 {
		up.Change = ChangeChange
	}
	up.StartServices, up.StopServices = dedup(up.StartServices), dedup(up.StopServices)
	if up.CountTo > up.CountFrom {
		up.SlotsAdded = up.CountTo - up.CountFrom
	} else {
		up.SlotsRemoved = slotNames(n.Unit.Name, up.CountTo, up.CountFrom)
	}
	if stay := min(up.CountFrom, up.CountTo); len(changed) > 0 && stay > 0 {
		up.Replace = ReplaceAll
		// A lone service that became a group, or back, changes every
		// member (its group is part of how it runs).
		kindChanged := isGroupUnit(c) != isGroupUnit(n)
		for _, s := range n.Services {
			if kindChanged || changed[s.Name] || (changed[n.Unit.Name] && s.Group == "") {
				up.ReplaceServices = append(up.ReplaceServices, s.Name)
			}
		}
		up.Rollout = rolloutOf(n.Unit.Placement, stay)
	}
	return up
}

// rolloutOf is how the update block of p (the new spec's) replaces the
// instances of stay slots.
func rolloutOf(p *schema.Placement, stay int) *Rollout {
	if p == nil {
		return nil
	}
	u := p.Update
	r := &Rollout{MaxParallel: u.MaxParallel, AutoPromote: u.AutoPromote, Batches: 1}
	if u.MaxParallel <= 0 {
		r.MaxParallel = 0
		return r
	}
	r.Canary = min(u.Canary, stay)
	r.Batches = (stay - r.Canary + u.MaxParallel - 1) / u.MaxParallel
	return r
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// slotNames are unit/from .. unit/to-1.
func slotNames(unit string, from, to int) []string {
	out := []string{}
	for k := from; k < to; k++ {
		out = append(out, fmt.Sprintf("%s/%d", unit, k))
	}
	return out
}

// mergeKeys is b's keys in order, with the keys only in a placed after
// the key they follow in a.
func mergeKeys(a, b []string) []string {
	out := append([]string(nil), b...)
	in := map[string]bool{}
	for _, k := range b {
		in[k] = true
	}
	prev := ""
	for _, k := range a {
		if !in[k] {
			at := 0
			if prev != "" {
				for i, x := range out {
					if x == prev {
						at = i + 1
						break
					}
				}
			}
			out = append(out[:at], append([]string{k}, out[at:]...)...)
			in[k] = true
		}
		prev = k
	}
	return out
}

// The unit's attributes as a tree: a lone service's attributes and its
// placement side by side (api.count, api.command), a group's placement and
// its members (web.count, web.app.command).

const (
	tagPlacement = "placement"
	tagMember    = "member"
)

// tree is an object with ordered keys.
type tree struct {
	keys []string
	vals map[string]any
	tags map[string]string
	// names maps a member's key to its service name.
	names map[string]string
}

func newTree() *tree {
	return &tree{vals: map[string]any{}, tags: map[string]string{}, names: map[string]string{}}
}

func (t *tree) set(key string, v any, tag string) {
	if _, ok := t.vals[key]; !ok {
		t.keys = append(t.keys, key)
	}
	t.vals[key], t.tags[key] = v, tag
}

// member is the service name of a member key, from whichever tree has it.
func (t *tree) member(key string, other *tree) string {
	if n, ok := t.names[key]; ok {
		return n
	}
	return other.names[key]
}

// MarshalJSON writes the keys in order.
func (t *tree) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range t.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(t.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// word is a value that reads without quotes (10s, SIGHUP, 0644) and is a
// JSON string.
type word string

func isGroupUnit(u cluster.UnitSpec) bool { return len(u.Services) != 1 || u.Services[0].Group != "" }

func unitTree(u cluster.UnitSpec) *tree {
	t := newTree()
	if p := u.Unit.Placement; p != nil {
		pt := normStruct(reflect.ValueOf(*p))
		for _, k := range pt.keys {
			t.set(k, pt.vals[k], tagPlacement)
		}
	}
	if !isGroupUnit(u) {
		st := normStruct(reflect.ValueOf(*u.Services[0]))
		for _, k := range st.keys {
			t.set(k, st.vals[k], "")
		}
		return t
	}
	for _, s := range u.Services {
		key := s.Name
		if _, clash := t.vals[key]; clash || !plainKey.MatchString(key) {
			key = "service " + strconv.Quote(s.Name)
		}
		t.set(key, normStruct(reflect.ValueOf(*s)), tagMember)
		t.names[key] = s.Name
	}
	return t
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	modeType     = reflect.TypeOf(os.FileMode(0))
	signalType   = reflect.TypeOf(syscall.Signal(0))
	checkType    = reflect.TypeOf(schema.Check{})
	serviceType  = reflect.TypeOf(schema.Service{})
)

// skipFields are not attributes: the service's name and group are the
// path, its placement is the unit's, and the source paths are gone after
// Reify.
var skipFields = map[reflect.Type]map[string]bool{
	serviceType: {"Name": true, "Group": true, "Placement": true, "SourceFile": true, "SourceDir": true},
}

// blockNames are the file's names for list fields.
var blockNames = map[string]string{
	"Checks":      "check",
	"Depends":     "depends_on",
	"Templates":   "template",
	"Constraints": "constraint",
	"Affinities":  "affinity",
	"Spreads":     "spread",
	"Targets":     "target",
	"UserGroup":   "group",
}

// labelFields name a list's elements, first found first: check "http",
// template "/etc/app.conf", constraint "node.meta.zone".
var labelFields = []string{"Name", "Destination", "Attribute", "Value"}

func normStruct(v reflect.Value) *tree {
	t := newTree()
	typ := v.Type()
	if typ == checkType {
		c := v.Interface().(schema.Check)
		switch c.Kind {
		case schema.CheckArgs:
			t.set(string(c.Kind), normValue(reflect.ValueOf(c.Args)), "")
		case schema.CheckTTL:
			t.set(string(c.Kind), word(c.TTL.String()), "")
		default:
			t.set(string(c.Kind), c.Target, "")
		}
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() || skipFields[typ][f.Name] {
			continue
		}
		if typ == checkType && (f.Name == "Name" || f.Name == "Kind" || f.Name == "Target" || f.Name == "Args" || f.Name == "TTL") {
			continue
		}
		fv := v.Field(i)
		name := blockNames[f.Name]
		if name == "" {
			name = snake(f.Name)
		}
		if isBlockList(f.Type) {
			for _, e := range blockList(name, fv) {
				t.set(e.key, e.val, "")
			}
			continue
		}
		if nv := normValue(fv); nv != nil {
			t.set(name, nv, "")
		}
	}
	return t
}

// isBlockList: a list of structs (or pointers to them), shown element by
// element.
func isBlockList(t reflect.Type) bool {
	if t.Kind() != reflect.Slice {
		return false
	}
	e := t.Elem()
	if e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	return e.Kind() == reflect.Struct
}

type entry struct {
	key string
	val any
}

// blockList is a list's elements as entries: `name "label"` when each
// element has a distinct label, name[i] otherwise.
func blockList(name string, v reflect.Value) []entry {
	var elems []reflect.Value
	for i := 0; i < v.Len(); i++ {
		e := v.Index(i)
		if e.Kind() == reflect.Pointer {
			if e.IsNil() {
				continue
			}
			e = e.Elem()
		}
		elems = append(elems, e)
	}
	labels := make([]string, len(elems))
	unique := true
	seen := map[string]bool{}
	for i, e := range elems {
		for _, lf := range labelFields {
			if f := e.FieldByName(lf); f.IsValid() && f.Kind() == reflect.String && f.String() != "" {
				labels[i] = f.String()
				break
			}
		}
		if labels[i] == "" || seen[labels[i]] {
			unique = false
		}
		seen[labels[i]] = true
	}
	out := make([]entry, 0, len(elems))
	for i, e := range elems {
		key := fmt.Sprintf("%s[%d]", name, i)
		if unique {
			key = name + " " + strconv.Quote(labels[i])
		}
		out = append(out, entry{key, normStruct(e)})
	}
	return out
}

// normValue is v as a tree or a JSON leaf; nil when absent.
func normValue(v reflect.Value) any {
	switch v.Type() {
	case durationType:
		return word(time.Duration(v.Int()).String())
	case modeType:
		return word(fmt.Sprintf("%04o", uint32(v.Uint())&0o7777))
	case signalType:
		if v.Int() == 0 {
			return nil
		}
		return word(schema.SignalName(syscall.Signal(v.Int())))
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return normValue(v.Elem())
	case reflect.Struct:
		return normStruct(v)
	case reflect.Map:
		t := newTree()
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i].Interface()) < fmt.Sprint(keys[j].Interface()) })
		for _, k := range keys {
			if nv := normValue(v.MapIndex(k)); nv != nil {
				t.set(quoteKey(fmt.Sprint(k.Interface())), nv, "")
			}
		}
		return t
	case reflect.Slice, reflect.Array:
		if isBlockList(v.Type()) {
			t := newTree()
			for _, e := range blockList("", v) {
				t.set(e.key, e.val, "")
			}
			return t
		}
		out := []any{}
		for i := 0; i < v.Len(); i++ {
			if nv := normValue(v.Index(i)); nv != nil {
				out = append(out, nv)
			}
		}
		return out
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	return fmt.Sprint(v.Interface())
}

// snake is a Go field name as the files write it: MaxPerNode max_per_node,
// SessionTTL session_ttl, ID id.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || (i+1 < len(r) && unicode.IsLower(r[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// quoteKey is a map key as a path segment: MODE, or "a.b" quoted.
func quoteKey(k string) string {
	if plainKey.MatchString(k) {
		return k
	}
	return strconv.Quote(k)
}

// diffValue reports every difference between a and b under path.
func diffValue(path string, a, b any, emit func(AttrDiff)) {
	at, aTree := a.(*tree)
	bt, bTree := b.(*tree)
	switch {
	case a == nil && b == nil:
	case a == nil || b == nil:
		emit(AttrDiff{Path: path, From: a, To: b})
	case aTree && bTree:
		for _, k := range mergeKeys(at.keys, bt.keys) {
			diffValue(path+"."+k, at.vals[k], bt.vals[k], emit)
		}
	case !reflect.DeepEqual(a, b):
		emit(AttrDiff{Path: path, From: a, To: b})
	}
}

// Text is the plan for people.
func (p Plan) Text() string {
	var b strings.Builder
	if !p.Changes {
		fmt.Fprintf(&b, "No changes. Deployment %s is at spec %d (%s).\n", p.Deployment, p.Current.N, p.Current.Hash)
		return b.String()
	}
	if p.Current == nil {
		fmt.Fprintf(&b, "Deployment %s has no spec yet; deploy would write spec %d (%s).\n", p.Deployment, p.Next.N, p.Next.Hash)
	} else {
		fmt.Fprintf(&b, "Deployment %s is at spec %d (%s); deploy would write spec %d (%s).\n",
			p.Deployment, p.Current.N, p.Current.Hash, p.Next.N, p.Next.Hash)
	}
	var added, changed, removed, slotsAdded, slotsRemoved, replaced int
	for _, u := range p.Units {
		b.WriteByte('\n')
		switch u.Change {
		case ChangeAdd:
			added++
			slotsAdded += u.SlotsAdded
			fmt.Fprintf(&b, "+ %s: count %d, %s\n", u.Unit, u.CountTo, slotsText(u))
		case ChangeRemove:
			removed++
			slotsRemoved += len(u.SlotsRemoved)
			stop := "their instances stop"
			if len(u.SlotsRemoved) == 1 {
				stop = "its instance stops"
			}
			fmt.Fprintf(&b, "- %s: count %d, %s; %s\n", u.Unit, u.CountFrom, slotsText(u), stop)
		case ChangeNone:
			fmt.Fprintf(&b, "  %s: no change\n", u.Unit)
		default:
			changed++
			slotsAdded += u.SlotsAdded
			slotsRemoved += len(u.SlotsRemoved)
			fmt.Fprintf(&b, "~ %s\n", u.Unit)
			for _, d := range shownDiffs(u.Diffs) {
				b.WriteString(indent(diffText(d), "    "))
			}
			if s := slotsText(u); s != "" {
				fmt.Fprintf(&b, "  %s\n", s)
			}
			b.WriteString(indent(replaceText(u), "  "))
			if u.Replace == ReplaceAll {
				replaced += min(u.CountFrom, u.CountTo) * len(u.ReplaceServices)
			}
		}
	}
	b.WriteByte('\n')
	if added+changed+removed == 0 && p.Current == nil {
		b.WriteString("The files declare no unit: deploy would write an empty spec.\n")
		return b.String()
	}
	if added+changed+removed == 0 {
		fmt.Fprintf(&b, "No unit changes: the files differ from spec %d only in form (such as the order of services), so deploy would write spec %d and nothing would start, stop or be replaced.\n",
			p.Current.N, p.Next.N)
		return b.String()
	}
	fmt.Fprintf(&b, "Plan: %s to add, %d to change, %d to remove; %s added, %d removed; %s replaced.\n",
		plural(added, "unit"), changed, removed, plural(slotsAdded, "slot"), slotsRemoved, plural(replaced, "instance"))
	return b.String()
}

// shownDiffs leaves out the moved positions of constraint, affinity and
// spread blocks (file:line:col, kept for explanations) unless nothing else
// changed: editing a line above a block moves it.
func shownDiffs(ds []AttrDiff) []AttrDiff {
	var out []AttrDiff
	for _, d := range ds {
		if !isPos(d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return ds
	}
	return out
}

func isPos(d AttrDiff) bool { return d.Placement && strings.HasSuffix(d.Path, ".pos") }

func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "ch"):
		return fmt.Sprintf("%d %ses", n, what)
	case strings.HasSuffix(what, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// slotsText says which slots start and stop: "2 slots added: api/3,
// api/4", "1 slot removed: api/4"; "" when none.
func slotsText(u UnitPlan) string {
	var parts []string
	if u.SlotsAdded > 0 {
		parts = append(parts, plural(u.SlotsAdded, "slot")+" added: "+slotRange(slotNames(u.Unit, u.CountFrom, u.CountTo)))
	}
	if len(u.SlotsRemoved) > 0 {
		parts = append(parts, plural(len(u.SlotsRemoved), "slot")+" removed: "+slotRange(u.SlotsRemoved))
	}
	if len(parts) == 0 && u.Change != ChangeChange {
		return "no slots"
	}
	return strings.Join(parts, "; ")
}

// slotRange lists slots, a long run as its ends: api/0..api/9.
func slotRange(s []string) string {
	if len(s) > 3 {
		return s[0] + ".." + s[len(s)-1]
	}
	return strings.Join(s, ", ")
}

// replaceText says which instances are replaced, started and stopped.
func replaceText(u UnitPlan) string {
	var b strings.Builder
	stay := slotNames(u.Unit, 0, min(u.CountFrom, u.CountTo))
	switch {
	case u.Replace == ReplaceAll && len(u.ReplaceServices) == 1 && u.ReplaceServices[0] == u.Unit:
		fmt.Fprintf(&b, "replaces: every instance (%s), %s\n", slotRange(stay), rolloutText(u.Rollout))
	case u.Replace == ReplaceAll:
		var names []string
		for _, s := range u.ReplaceServices {
			names = append(names, u.Unit+"."+s)
		}
		fmt.Fprintf(&b, "replaces: %s in every slot (%s), %s\n", strings.Join(names, ", "), slotRange(stay), rolloutText(u.Rollout))
	case len(stay) == 0:
		b.WriteString("replaces: none (no slot stays)\n")
	default:
		onlyPlacement := true
		for _, d := range u.Diffs {
			onlyPlacement = onlyPlacement && d.Placement
		}
		if onlyPlacement {
			b.WriteString("replaces: none (placement only)\n")
		} else {
			b.WriteString("replaces: none\n")
		}
	}
	for _, s := range u.StartServices {
		fmt.Fprintf(&b, "starts: %s.%s in every slot\n", u.Unit, s)
	}
	for _, s := range u.StopServices {
		fmt.Fprintf(&b, "stops: %s.%s in every slot\n", u.Unit, s)
	}
	return b.String()
}

// rolloutText says how the instances are replaced, as the update block
// says.
func rolloutText(r *Rollout) string {
	switch {
	case r == nil:
		return "all at once"
	case r.MaxParallel == 0:
		return "all at once (update.max_parallel = 0)"
	}
	s := fmt.Sprintf("in %s of %d", plural(r.Batches, "batch"), r.MaxParallel)
	if r.Canary > 0 {
		promote := "a promotion"
		if r.AutoPromote {
			promote = "their health (auto_promote)"
		}
		if r.Batches == 0 {
			s = fmt.Sprintf("as %s, then %s", plural(r.Canary, "canary"), promote)
		} else {
			s = fmt.Sprintf("%s first, then after %s %s", plural(r.Canary, "canary"), promote, s)
		}
	}
	return s
}

// diffText is one attribute's line: "~ api.count: 3 -> 5", "+ api.check
// "http"", "- api.env.OLD: "x""; a long text is shown line by line.
func diffText(d AttrDiff) string {
	switch {
	case d.From == nil:
		if _, obj := d.To.(*tree); obj {
			return "+ " + d.Path + "\n"
		}
		return "+ " + d.Path + ": " + leafText(d.To) + "\n"
	case d.To == nil:
		if _, obj := d.From.(*tree); obj {
			return "- " + d.Path + "\n"
		}
		return "- " + d.Path + ": " + leafText(d.From) + "\n"
	}
	as, aStr := d.From.(string)
	bs, bStr := d.To.(string)
	if aStr && bStr && (long(as) || long(bs)) {
		return "~ " + d.Path + ":\n" + indent(lineDiff(as, bs), "    ")
	}
	return "~ " + d.Path + ": " + leafText(d.From) + " -> " + leafText(d.To) + "\n"
}

func long(s string) bool { return strings.Contains(s, "\n") || len(s) > 80 }

func leafText(v any) string {
	switch x := v.(type) {
	case word:
		return string(x)
	case string:
		if long(x) {
			return fmt.Sprintf("(%s)", plural(strings.Count(strings.TrimSuffix(x, "\n"), "\n")+1, "line"))
		}
		return strconv.Quote(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = leafText(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *tree:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = k + " = " + leafText(x.vals[k])
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	return fmt.Sprint(v)
}

// lineDiff shows the lines of a removed and added, by their longest
// common subsequence, without context; long texts only in sum.
func lineDiff(a, b string) string {
	al := strings.Split(strings.TrimSuffix(a, "\n"), "\n")
	bl := strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	if len(al)*len(bl) > 1<<20 {
		return fmt.Sprintf("(%s -> %s)\n", plural(len(al), "line"), plural(len(bl), "line"))
	}
	// lcs[i][j]: the common subsequence of al[i:] and bl[j:].
	lcs := make([][]int, len(al)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bl)+1)
	}
	for i := len(al) - 1; i >= 0; i-- {
		for j := len(bl) - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	const maxLines = 20
	var out []string
	i, j := 0, 0
	for i < len(al) || j < len(bl) {
		switch {
		case i < len(al) && j < len(bl) && al[i] == bl[j]:
			i, j = i+1, j+1
		case i < len(al) && (j == len(bl) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+al[i])
			i++
		default:
			out = append(out, "+ "+bl[j])
			j++
		}
	}
	if len(out) > maxLines {
		out = append(out[:maxLines], fmt.Sprintf("(%d more changed lines)", len(out)-maxLines))
	}
	return strings.Join(out, "\n") + "\n"
}

// count is u's slot count (0 without a placement).
func count(u cluster.UnitSpec) int {
	if u.Unit.Placement == nil {
		return 0
	}
	return u.Unit.Placement.Count
}

// indent puts pre before every line of s.
func indent(s, pre string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(pre + strings.TrimSuffix(l, "\n") + "\n")
		}
	}
	return b.String()
}
