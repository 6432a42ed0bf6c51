package schema

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	version "github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// maxSlots bounds count and max_per_node. Every node watches the slots of
// every cluster service and ranks itself for each free one, so a count in
// the millions is a mistake, not a fleet.
const maxSlots = 10000

// Weights of affinities and spreads, and spread target percentages.
const (
	minWeight = 1
	maxWeight = 100
)

// defaultPlacement is a Placement with every default applied and no count.
func defaultPlacement() *Placement {
	return &Placement{
		MaxPerNode: DefaultMaxPerNode,
		Reschedule: Reschedule{
			Unlimited:     true,
			Delay:         DefaultRescheduleDelay,
			DelayFunction: DelayExponential,
			MaxDelay:      DefaultRescheduleMaxDelay,
			Penalty:       DefaultReschedulePenalty,
		},
		Update: Update{
			MaxParallel:      DefaultUpdateMaxParallel,
			HealthCheck:      UpdateChecks,
			MinHealthyTime:   DefaultUpdateMinHealthyTime,
			HealthyDeadline:  DefaultUpdateHealthyDeadline,
			ProgressDeadline: DefaultUpdateProgressDeadline,
		},
	}
}

// unit names a cluster unit in diagnostics: `service "api"` or `group "g"`.
type unit struct {
	kind, name string
	// members are the names of the services the unit consists of: the
	// service itself, or the group's members.
	members []string
}

func (u unit) String() string { return fmt.Sprintf("%s %q", u.kind, u.name) }

// placementItems returns the placement arguments and blocks of a body, in
// source order, as (name, range) pairs for diagnostics.
type placementItem struct {
	name string
	rng  hcl.Range
}

func placementItems(attrs hcl.Attributes, blocks []*hcl.Block) []placementItem {
	var items []placementItem
	for _, name := range placementAttrs {
		if attr, ok := attrs[name]; ok {
			items = append(items, placementItem{name, attr.NameRange})
		}
	}
	for _, b := range blocks {
		if isPlacementBlock(b.Type) {
			items = append(items, placementItem{b.Type, b.DefRange})
		}
	}
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].rng.Start.Byte < items[j-1].rng.Start.Byte; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
	return items
}

func isPlacementBlock(t string) bool {
	for _, b := range placementBlocks {
		if b == t {
			return true
		}
	}
	return false
}

// memberPlacement reports each placement argument or block of a group's
// member: the group moves as one, so they belong on the group.
func (l *loader) memberPlacement(svc, group string, attrs hcl.Attributes, blocks []*hcl.Block) {
	for _, it := range placementItems(attrs, blocks) {
		l.errorf(it.rng, "Placement on a group member",
			"Service %q is a member of group %q, which moves as one: its services share the group's slots and always run on the same node. Set %s on group %q instead.",
			svc, group, it.name, group)
	}
}

// decodePlacement decodes the placement arguments and blocks of a service
// or group body. It returns nil when the body has no count: a unit without
// count runs on every node whose files declare it, and any other placement
// setting is then an error.
func (l *loader) decodePlacement(e *evaluator, u unit, attrs hcl.Attributes, blocks []*hcl.Block) *Placement {
	p := defaultPlacement()
	countAttr, hasCount := attrs["count"]
	count := -1 // unknown: absent or invalid
	if hasCount {
		if n, ok := e.Int(countAttr, math.MinInt64, math.MaxInt64); ok {
			switch {
			case n < 0:
				l.errorf(countAttr.Expr.Range(), "Invalid count",
					"count is how many instances of %s run across the cluster; it cannot be negative, got %d.", u, n)
			case n > maxSlots:
				l.errorf(countAttr.Expr.Range(), "Invalid count",
					"count must be at most %d, got %d: every node watches each slot of a cluster service.", maxSlots, n)
			default:
				p.Count, count = n, n
				if n == 0 {
					l.warnf(countAttr.Expr.Range(), "No instance will run",
						"count = 0 keeps %s declared, but no node runs an instance of it: the holders of its slots stop and release them. Raise count to run it.", u)
				}
			}
		}
	}
	if attr, ok := attrs["max_per_node"]; ok {
		if n, ok := e.Int(attr, math.MinInt64, math.MaxInt64); ok {
			if n < 1 || n > maxSlots {
				l.errorf(attr.Expr.Range(), "Invalid max_per_node",
					"max_per_node bounds how many instances of %s one node runs, from 1 (the default: every instance on a different node) to %d; got %d.", u, maxSlots, n)
			} else {
				p.MaxPerNode = n
			}
		}
	}
	if attr, ok := attrs["exclusive"]; ok {
		p.Exclusive, _ = e.Bool(attr)
	}
	if attr, ok := attrs["stop_after"]; ok {
		if d, ok := e.Duration(attr); ok {
			p.StopAfter = d
			if d > 0 && p.Exclusive {
				l.errorf(attr.NameRange, "stop_after with exclusive",
					"exclusive = true already stops an instance whose node is cut off from Consul, within lock_delay/2, before another node can take its slot. stop_after is for services with exclusive = false, which keep running when cut off; remove stop_after, or set exclusive = false.")
			}
		}
	}
	if attr, ok := attrs["scheduler_algorithm"]; ok {
		if v, ok := e.String(attr); ok {
			switch v {
			case AlgorithmBinpack:
				// the default: kept as "" so that the spec's hash is as without it
			case AlgorithmSpread:
				p.SchedulerAlgorithm = v
			default:
				l.errorf(attr.Expr.Range(), "Invalid scheduler_algorithm",
					"scheduler_algorithm is how %s's slots choose among the nodes with room for them: %q (the default: the node fullest after placement, leaving whole nodes free) or %q (the emptiest node); got %q.",
					u, AlgorithmBinpack, AlgorithmSpread, v)
			}
		}
	}

	var resched, update *hcl.Block
	spreads := map[string]hcl.Range{}
	for _, b := range blocks {
		switch b.Type {
		case "constraint":
			if c := l.decodeConstraint(e, b, u); c != nil {
				p.Constraints = append(p.Constraints, c)
			}
		case "affinity":
			if a := l.decodeAffinity(e, b); a != nil {
				p.Affinities = append(p.Affinities, a)
			}
		case "spread":
			s := l.decodeSpread(e, b)
			if s == nil {
				continue
			}
			if prev, dup := spreads[s.Attribute]; dup {
				l.errorf(b.DefRange, "Duplicate spread",
					"%s already spreads over %s at %s; give each attribute one spread block, with its targets in it.", u, s.Attribute, at(prev))
				continue
			}
			spreads[s.Attribute] = b.DefRange
			p.Spreads = append(p.Spreads, s)
		case "reschedule":
			if resched != nil {
				l.errorf(b.DefRange, "Duplicate reschedule block",
					"%s already has a reschedule block at %s; there can be only one.", u, at(resched.DefRange))
				continue
			}
			resched = b
		case "update":
			if update != nil {
				l.errorf(b.DefRange, "Duplicate update block",
					"%s already has an update block at %s; there can be only one.", u, at(update.DefRange))
				continue
			}
			update = b
		}
	}
	if resched != nil {
		p.Reschedule = l.decodeReschedule(e, resched)
	}
	if update != nil {
		p.Update = l.decodeUpdate(e, update, u, count)
	}

	if !hasCount {
		items := placementItems(attrs, blocks)
		if len(items) == 0 {
			return nil
		}
		var names []string
		seen := map[string]bool{}
		for _, it := range items {
			if !seen[it.name] {
				seen[it.name] = true
				names = append(names, it.name)
			}
		}
		verb := "applies"
		if len(names) > 1 {
			verb = "apply"
		}
		l.errorf(items[0].rng, "Placement without count",
			"%s only %s to a cluster unit, which runs count instances across the nodes started with mariposa run -cluster, each in a slot. Add count = N to %s, or remove %s.",
			wordList(names), verb, u, wordList(names))
		return nil
	}
	return p
}

// wordList renders names as "a", "a and b" or "a, b and c".
func wordList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// operand is the attribute, operator and value of a constraint or affinity
// block, with what is needed to report problems about them.
type operand struct {
	block     *hcl.Block
	kind      string // "constraint" or "affinity"
	attribute string
	attrOK    bool
	operator  string
	opOK      bool
	opAttr    *hcl.Attribute
	value     string
	valueOK   bool // false when value was given but did not evaluate
	valAttr   *hcl.Attribute
}

func (l *loader) decodeConstraint(e *evaluator, b *hcl.Block, u unit) *Constraint {
	content, diags := bodyContent(b.Body, constraintSchema)
	for _, d := range diags {
		// Nomad's shorthand: constraint { distinct_hosts = true }.
		if m := unsupportedName.FindStringSubmatch(d.Detail); m != nil && nomadOperators[m[1]] != "" {
			d.Detail += " " + nomadOperators[m[1]]
		}
	}
	l.diags = append(l.diags, diags...)
	o := l.decodeOperand(e, b, "constraint", content.Attributes)
	ok := o.attrOK && o.opOK && o.valueOK
	if ok && strings.HasPrefix(o.attribute, "service.") {
		name := strings.TrimPrefix(o.attribute, "service.")
		for _, m := range u.members {
			if m == name {
				what := fmt.Sprintf("%s counts the instances of %s itself", o.attribute, u)
				if u.kind == "group" {
					what = fmt.Sprintf("%s counts the instances of %q, a member of %s", o.attribute, name, u)
				}
				l.errorf(content.Attributes["attribute"].Expr.Range(), "Constraint on itself",
					"%s: a hard rule on its own instances would keep the first one from ever being placed, or only repeat max_per_node. Use max_per_node to bound how many instances share a node, or an affinity on %s to prefer packing them (==~) or spreading them (!=~).",
					what, o.attribute)
				ok = false
			}
		}
	}
	if !ok || diags.HasErrors() {
		return nil
	}
	return &Constraint{Attribute: o.attribute, Operator: o.operator, Value: o.value, Pos: at(b.DefRange)}
}

func (l *loader) decodeAffinity(e *evaluator, b *hcl.Block) *Affinity {
	content, diags := bodyContent(b.Body, affinitySchema)
	l.diags = append(l.diags, diags...)
	o := l.decodeOperand(e, b, "affinity", content.Attributes)
	weight, wOK := DefaultAffinityWeight, true
	if attr, ok := content.Attributes["weight"]; ok {
		weight, wOK = l.weight(e, attr, o.operator)
	}
	if !o.attrOK || !o.opOK || !o.valueOK || !wOK || diags.HasErrors() {
		return nil
	}
	return &Affinity{Attribute: o.attribute, Operator: o.operator, Value: o.value, Weight: weight, Pos: at(b.DefRange)}
}

// weight decodes the weight of an affinity (op is its operator) or, with
// op "", of a spread.
func (l *loader) weight(e *evaluator, attr *hcl.Attribute, op string) (int, bool) {
	n, ok := e.Int(attr, math.MinInt64, math.MaxInt64)
	if !ok {
		return 0, false
	}
	if n >= minWeight && n <= maxWeight {
		return n, true
	}
	hint := ""
	if n < 0 && op != "" {
		opposite := OpAvoid
		if op == OpAvoid {
			opposite = OpPrefer
		}
		hint = fmt.Sprintf(" Nomad's negative weights are written here as a positive weight with the opposite operator: operator = %q.", opposite)
	}
	l.errorf(attr.Expr.Range(), "Invalid weight", "weight must be from %d to %d, got %d.%s", minWeight, maxWeight, n, hint)
	return 0, false
}

// decodeOperand decodes and checks attribute, operator and value.
func (l *loader) decodeOperand(e *evaluator, b *hcl.Block, kind string, attrs hcl.Attributes) operand {
	o := operand{block: b, kind: kind, valueOK: true, opOK: true}
	o.operator = OpEqual
	if kind == "affinity" {
		o.operator = OpPrefer
	}
	if attr, ok := attrs["attribute"]; ok {
		o.attribute, o.attrOK = l.placementAttribute(e, attr, kind)
	}
	if attr, ok := attrs["operator"]; ok {
		o.opAttr = attr
		o.operator, o.opOK = l.operator(e, attr, kind)
	}
	if attr, ok := attrs["value"]; ok {
		o.valAttr = attr
		o.value, o.valueOK = e.String(attr)
	}
	if o.opOK && o.valueOK {
		o.valueOK = l.checkOperand(&o)
	}
	return o
}

// operator decodes a constraint or affinity operator.
func (l *loader) operator(e *evaluator, attr *hcl.Attribute, kind string) (string, bool) {
	op, ok := e.String(attr)
	if !ok {
		return "", false
	}
	if op == "=" {
		return OpEqual, true
	}
	valid := constraintOperators
	if kind == "affinity" {
		valid = affinityOperators
	}
	for _, v := range valid {
		if op == v {
			return op, true
		}
	}
	rng := attr.Expr.Range()
	if kind == "constraint" && (op == OpPrefer || op == OpAvoid) {
		l.errorf(rng, "Affinity operator in a constraint",
			"%q is an affinity operator: a constraint is a hard rule that a node passes or fails. Use an affinity block for a soft preference, or %q for a hard one.",
			op, strings.TrimSuffix(op, "~"))
		return "", false
	}
	hint := nomadOperators[op]
	if hint == "" {
		hint = didYouMean(op, valid)
	} else {
		hint = " " + hint
	}
	l.errorf(rng, "Unknown operator", "%q is not a %s operator; use %s.%s", op, kind, quotedList(valid), hint)
	return "", false
}

// nomadOperators explain Nomad's operators that mariposa has not.
var nomadOperators = map[string]string{
	"distinct_hosts":    "Instances already run on distinct nodes: max_per_node defaults to 1.",
	"distinct_property": `Use a spread block to share instances out over an attribute's values, or max_per_node for one per node.`,
	"set_contains_all":  `Use "set_contains", which requires every listed element.`,
	"set_contains_any":  `mariposa has no "set_contains_any"; use "regexp" with an alternation such as "(^|,)(a|b)(,|$)".`,
	"semver":            `Use "version", whose value is a version constraint such as ">= 1.2, < 2".`,
	"<":                 `mariposa has no ordering operators; compare versions with "version" and a value such as "< 2".`,
	"<=":                `mariposa has no ordering operators; compare versions with "version" and a value such as "<= 2".`,
	">":                 `mariposa has no ordering operators; compare versions with "version" and a value such as "> 1.2".`,
	">=":                `mariposa has no ordering operators; compare versions with "version" and a value such as ">= 1.2".`,
}

// checkOperand checks that the value fits the attribute and the operator.
func (l *loader) checkOperand(o *operand) bool {
	where := o.block.DefRange
	if o.opAttr != nil {
		where = o.opAttr.Expr.Range()
	}
	service := o.attrOK && strings.HasPrefix(o.attribute, "service.")
	switch o.operator {
	case OpIsSet, OpIsNotSet:
		if o.valAttr != nil {
			l.errorf(o.valAttr.NameRange, "Unexpected value",
				"The operator %q only tests whether the attribute is set, and takes no value; remove value.", o.operator)
			return false
		}
		return true
	case OpRegexp, OpVersion, OpSetContains:
		if service {
			l.errorf(where, "Operator not valid here",
				"%s is the number of instances of that service on the node: compare it with == or != (or ==~ and !=~ in an affinity), or test it with is_set and is_not_set.",
				o.attribute)
			return false
		}
	}
	if o.value == "" {
		if service || !o.attrOK {
			return true // runs (or, negated, does not run) on the node
		}
		l.errorf(where, "Missing value", "%s", missingValue(o))
		return false
	}
	rng := o.valAttr.Expr.Range()
	switch o.operator {
	case OpRegexp:
		if _, err := regexp.Compile(o.value); err != nil {
			l.errorf(rng, "Invalid regular expression",
				"The value of a regexp %s is a Go regular expression (RE2 syntax, as in Nomad): %s.", o.kind, err)
			return false
		}
	case OpVersion:
		if _, err := version.NewConstraint(o.value); err != nil {
			l.errorf(rng, "Invalid version constraint",
				`%q is not a version constraint: %s. Write for example ">= 1.2, < 2" or "~> 1.4".`, o.value, err)
			return false
		}
	case OpSetContains:
		for _, el := range strings.Split(o.value, ",") {
			if strings.TrimSpace(el) == "" {
				l.errorf(rng, "Invalid set",
					`The value of set_contains is a comma-separated list of elements, none of them empty, such as "ssd,nvme"; got %q.`, o.value)
				return false
			}
		}
	default:
		if service {
			if n, err := strconv.ParseUint(o.value, 10, 31); err != nil || strconv.FormatUint(n, 10) != o.value {
				l.errorf(rng, "Invalid value",
					`%s is the number of instances of that service on the node: the value must be a whole number such as "1", or leave value out to mean "runs on the node".`,
					o.attribute)
				return false
			}
		}
	}
	return true
}

func missingValue(o *operand) string {
	switch o.operator {
	case OpRegexp:
		return `The operator "regexp" matches the attribute against a regular expression; set value, for example value = "^eu-".`
	case OpVersion:
		return `The operator "version" checks the attribute against a version constraint; set value, for example value = ">= 1.2, < 2".`
	case OpSetContains:
		return `The operator "set_contains" checks that the attribute, a comma-separated list, holds every element of value; set value, for example value = "ssd,nvme".`
	}
	attr := o.attribute
	if attr == "" {
		attr = "the attribute"
	}
	return fmt.Sprintf(`The operator %q compares %s with a value; set value. To require only that it is set, use operator = "is_set" (or "is_not_set").`, o.operator, attr)
}

// Placement attributes.
var fixedAttributes = []string{"node.name", "node.datacenter", "mariposa.version"}

const attributeForms = "node.name, node.datacenter, node.meta.<key>, mariposa.version or service.<name>"

// placementAttribute decodes and checks the attribute of a constraint,
// affinity or spread.
func (l *loader) placementAttribute(e *evaluator, attr *hcl.Attribute, kind string) (string, bool) {
	summary := "Invalid " + kind + " attribute"
	if name, ok := nomadInterpolation(attr.Expr); ok {
		hint := ""
		if s := suggestAttribute(name); s != "" {
			hint = fmt.Sprintf(": write attribute = %q", s)
		} else if attributeProblem(name) == "" {
			hint = fmt.Sprintf(": write attribute = %q", name)
		} else {
			hint = "; the attributes are " + attributeForms
		}
		l.errorf(attr.Expr.Range(), summary,
			"mariposa names the attribute as a plain string, without Nomad's ${...}%s.", hint)
		return "", false
	}
	s, ok := e.String(attr)
	if !ok {
		return "", false
	}
	if detail := attributeProblem(s); detail != "" {
		l.errorf(attr.Expr.Range(), summary, "%s", detail)
		return "", false
	}
	if kind == "spread" && strings.HasPrefix(s, "service.") {
		l.errorf(attr.Expr.Range(), summary,
			"A spread shares instances out over the values of a node attribute (node.name, node.datacenter, node.meta.<key> or mariposa.version); %s is not one. To keep away from a service, use an affinity with operator = \"!=~\" or a constraint with \"!=\".", s)
		return "", false
	}
	return s, true
}

// attributeProblem returns why s is not a placement attribute, or "".
func attributeProblem(s string) string {
	for _, f := range fixedAttributes {
		if s == f {
			return ""
		}
	}
	switch {
	case s == "node.meta" || strings.HasPrefix(s, "node.meta."):
		key := strings.TrimPrefix(strings.TrimPrefix(s, "node.meta"), ".")
		if key == "" {
			return `node.meta.<key> needs the key of a Consul node meta entry, for example "node.meta.zone".`
		}
		if !metaKey.MatchString(key) || len(key) > 128 {
			return fmt.Sprintf("%q is not a Consul node meta key: keys are up to 128 letters, digits, dashes and underscores.", key)
		}
		return ""
	case s == "service" || strings.HasPrefix(s, "service."):
		name := strings.TrimPrefix(strings.TrimPrefix(s, "service"), ".")
		if name == "" {
			return `service.<name> needs the name of a service, for example "service.mysql".`
		}
		if !validName.MatchString(name) || len(name) > maxNameLen {
			return fmt.Sprintf("%q is not a valid service name: use at most %d letters, digits, dashes or underscores, starting with a letter or digit.", name, maxNameLen)
		}
		return ""
	case strings.HasPrefix(s, "attr."):
		return fmt.Sprintf("%q is a Nomad fingerprint attribute, and mariposa fingerprints nothing: publish what placement needs as Consul node meta (node_meta in the agent's configuration) and use node.meta.<key>.", s)
	}
	hint := ""
	if sug := suggestAttribute(s); sug != "" {
		hint = fmt.Sprintf(" Did you mean %q?", sug)
	}
	return fmt.Sprintf("%q is not an attribute mariposa knows; use %s.%s", s, attributeForms, hint)
}

// suggestAttribute returns the valid attribute s most likely means, or "".
func suggestAttribute(s string) string {
	if v := suggest(s, fixedAttributes); v != "" {
		return v
	}
	switch s {
	case "node.unique.name", "attr.unique.hostname":
		return "node.name"
	}
	if rest, ok := strings.CutPrefix(s, "meta."); ok && rest != "" {
		return "node.meta." + rest // Nomad's ${meta.<key>}
	}
	parts := strings.SplitN(s, ".", 3)
	if len(parts) == 3 && parts[2] != "" {
		if suggestName(parts[0]+"."+parts[1], []string{"node.meta"}) != "" {
			if cand := "node.meta." + parts[2]; attributeProblem(cand) == "" {
				return cand
			}
		}
	}
	if len(parts) >= 2 && parts[1] != "" {
		if suggestName(parts[0], []string{"service"}) != "" {
			if cand := "service." + strings.Join(parts[1:], "."); attributeProblem(cand) == "" {
				return cand
			}
		}
	}
	return ""
}

// nomadInterpolation recognises attribute = "${node.meta.zone}", Nomad's
// way of naming an attribute, and returns the name. Interpolations of
// variables ("${var.attr}") are ordinary expressions.
func nomadInterpolation(expr hcl.Expression) (string, bool) {
	wrap, ok := expr.(*hclsyntax.TemplateWrapExpr)
	if !ok {
		return "", false
	}
	st, ok := wrap.Wrapped.(*hclsyntax.ScopeTraversalExpr)
	if !ok || st.Traversal.RootName() == "var" {
		return "", false
	}
	parts := []string{st.Traversal.RootName()}
	for _, step := range st.Traversal[1:] {
		a, ok := step.(hcl.TraverseAttr)
		if !ok {
			return "", false
		}
		parts = append(parts, a.Name)
	}
	return strings.Join(parts, "."), true
}

func (l *loader) decodeSpread(e *evaluator, b *hcl.Block) *Spread {
	content, diags := bodyContent(b.Body, spreadSchema)
	for _, d := range diags {
		if d.Summary == "Missing value for target" {
			// HCL says "All target blocks must have 1 labels (value)."
			d.Detail = `A target names its value as the block's label, as in Nomad: target "eu-west-1a" { percent = 50 }.`
		}
	}
	l.diags = append(l.diags, diags...)
	s := &Spread{Weight: DefaultSpreadWeight, Pos: at(b.DefRange)}
	ok := !diags.HasErrors()
	if attr, aok := content.Attributes["attribute"]; aok {
		var attrOK bool
		s.Attribute, attrOK = l.placementAttribute(e, attr, "spread")
		ok = ok && attrOK
	}
	if attr, aok := content.Attributes["weight"]; aok {
		var wOK bool
		s.Weight, wOK = l.weight(e, attr, "")
		ok = ok && wOK
	}
	targets := map[string]hcl.Range{}
	sum, sumOK := 0, true
	for _, tb := range content.Blocks {
		value := tb.Labels[0]
		if value == "" {
			l.errorf(tb.LabelRanges[0], "Invalid spread target",
				"A target names a value of the spread's attribute, such as target \"eu-west-1a\"; it cannot be empty.")
			ok = false
		} else if prev, dup := targets[value]; dup {
			l.errorf(tb.LabelRanges[0], "Duplicate spread target",
				"This spread already has a target %q at %s; give each value one target.", value, at(prev))
			ok = false
			continue
		}
		targets[value] = tb.DefRange
		tc, tdiags := bodyContent(tb.Body, spreadTargetSchema)
		l.diags = append(l.diags, tdiags...)
		attr, aok := tc.Attributes["percent"]
		if !aok {
			ok, sumOK = false, false
			continue
		}
		n, nok := e.Int(attr, math.MinInt64, math.MaxInt64)
		if !nok {
			ok, sumOK = false, false
			continue
		}
		if n < 0 || n > 100 {
			l.errorf(attr.Expr.Range(), "Invalid percent",
				"percent is the share of the instances to place on nodes whose %s is %q, from 0 to 100; got %d.", spreadAttr(s), value, n)
			ok, sumOK = false, false
			continue
		}
		sum += n
		s.Targets = append(s.Targets, SpreadTarget{Value: value, Percent: n})
	}
	if sumOK && sum > 100 {
		l.errorf(b.DefRange, "Spread targets over 100%",
			"The targets of this spread add up to %d%%: they share out the instances, so together they can have at most 100%%. (Below 100, the rest is spread over the other values.)", sum)
		ok = false
	}
	if !ok {
		return nil
	}
	return s
}

func spreadAttr(s *Spread) string {
	if s.Attribute == "" {
		return "attribute"
	}
	return s.Attribute
}

func (l *loader) decodeReschedule(e *evaluator, b *hcl.Block) Reschedule {
	r := defaultPlacement().Reschedule
	content, diags := bodyContent(b.Body, rescheduleSchema)
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes

	attemptsAttr, hasAttempts := attrs["attempts"]
	intervalAttr, hasInterval := attrs["interval"]
	unlimAttr, hasUnlim := attrs["unlimited"]
	attemptsOK := true
	if hasAttempts {
		n, ok := e.Int(attemptsAttr, math.MinInt64, math.MaxInt64)
		switch {
		case !ok:
			attemptsOK = false
		case n < 0 || n > maxCount:
			l.errorf(attemptsAttr.Expr.Range(), "Invalid attempts",
				"attempts is how many times an instance is moved to another node within interval, from 0 (never) to %d; got %d.", maxCount, n)
			attemptsOK = false
		default:
			r.Attempts = n
		}
	}
	intervalOK := true
	if hasInterval {
		r.Interval, intervalOK = e.Duration(intervalAttr)
	}
	// Setting attempts turns unlimited off, unless unlimited is set too
	// (Nomad keeps unlimited on and silently ignores attempts).
	if hasAttempts {
		r.Unlimited = false
	}
	if hasUnlim {
		if v, ok := e.Bool(unlimAttr); ok {
			r.Unlimited = v
		}
	}
	if r.Unlimited {
		for _, attr := range []*hcl.Attribute{attemptsAttr, intervalAttr} {
			if attr == nil {
				continue
			}
			why := "unlimited = true"
			if !hasUnlim {
				why = "unlimited, which is true unless attempts is set,"
			}
			l.warnf(attr.NameRange, attr.Name+" not used",
				"With %s every instance that exhausts its restarts moves to another node, and attempts and interval are not used. Set attempts (and unlimited = false) to bound how often it moves.", why)
			break
		}
	}
	if !r.Unlimited && attemptsOK && intervalOK && r.Attempts > 0 && r.Interval <= 0 {
		if hasInterval {
			l.errorf(intervalAttr.Expr.Range(), "Invalid duration",
				"interval is the window in which attempts are counted and must be greater than zero; set attempts = 0 to never move the instance.")
		} else {
			l.errorf(attemptsAttr.Expr.Range(), "Missing interval",
				`attempts counts moves within interval; set interval too, for example interval = "1h".`)
		}
	}
	delayOK := true
	if attr, ok := attrs["delay"]; ok {
		if d, ok := e.Duration(attr); ok {
			r.Delay = d
		} else {
			delayOK = false
		}
	}
	if attr, ok := attrs["delay_function"]; ok {
		if s, ok := e.Enum(attr, "Invalid delay_function", delayFunctions); ok {
			r.DelayFunction = s
		}
	}
	l.checkMaxDelay(e, attrs, delayOK, r.Delay, &r.MaxDelay, "The wait before another node takes the slot starts at delay (%s) and grows")
	for _, name := range []string{"penalty", "node_lost_after"} {
		attr, ok := attrs[name]
		if !ok {
			continue
		}
		if d, ok := e.Duration(attr); ok {
			if name == "penalty" {
				r.Penalty = d
			} else {
				r.NodeLostAfter = d
			}
		}
	}
	return r
}

// nomadUpdate explains the arguments of Nomad's update block that mariposa
// has not.
var nomadUpdate = map[string]string{
	"stagger": "Nomad's stagger paces the updates of system jobs; here max_parallel and min_healthy_time pace an update.",
}

// decodeUpdate decodes the update block of u, whose count is count (-1
// when it is absent or invalid).
func (l *loader) decodeUpdate(e *evaluator, b *hcl.Block, u unit, count int) Update {
	up := defaultPlacement().Update
	content, diags := bodyContent(b.Body, updateSchema)
	for _, d := range diags {
		if m := unsupportedName.FindStringSubmatch(d.Detail); m != nil && nomadUpdate[m[1]] != "" {
			d.Detail += " " + nomadUpdate[m[1]]
		}
	}
	l.diags = append(l.diags, diags...)
	attrs := content.Attributes

	// instances decodes max_parallel or canary: from 0 (which means zero)
	// to maxSlots; what is what the number counts.
	instances := func(attr *hcl.Attribute, what, zero string) (int, bool) {
		n, ok := e.Int(attr, math.MinInt64, math.MaxInt64)
		if !ok {
			return 0, false
		}
		if n < 0 || n > maxSlots {
			l.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s is how many instances of %s %s, from 0 (%s) to %d; got %d.",
				attr.Name, u, what, zero, maxSlots, n)
			return 0, false
		}
		return n, true
	}
	mpAttr, hasMP := attrs["max_parallel"]
	mpOK := true
	if hasMP {
		up.MaxParallel, mpOK = instances(mpAttr, "update at once", "every instance at once: no rolling update")
	}
	canAttr, hasCanary := attrs["canary"]
	canOK := true
	if hasCanary {
		up.Canary, canOK = instances(canAttr, "update first, while the others wait for a promotion", "no canaries")
	}

	if attr, ok := attrs["health_check"]; ok {
		if s, ok := e.String(attr); ok {
			if l.healthCheck(attr, s) {
				up.HealthCheck = s
			}
		}
	}

	minOK, healthyOK, progressOK := true, true, true
	for _, d := range []struct {
		name string
		dst  *time.Duration
		ok   *bool
	}{
		{"min_healthy_time", &up.MinHealthyTime, &minOK},
		{"healthy_deadline", &up.HealthyDeadline, &healthyOK},
		{"progress_deadline", &up.ProgressDeadline, &progressOK},
	} {
		if attr, ok := attrs[d.name]; ok {
			*d.dst, *d.ok = e.Duration(attr)
		}
	}
	minAttr := attrs["min_healthy_time"]
	healthyAttr, hasHealthy := attrs["healthy_deadline"]
	progressAttr, hasProgress := attrs["progress_deadline"]
	switch {
	case !healthyOK:
	case up.HealthyDeadline == 0:
		l.errorf(healthyAttr.Expr.Range(), "Invalid healthy_deadline",
			`healthy_deadline is how long an updated instance of %s has to become healthy; it must be more than zero (the default is "5m").`, u)
		healthyOK = false
	case minOK && up.MinHealthyTime >= up.HealthyDeadline:
		if hasHealthy {
			l.errorf(healthyAttr.Expr.Range(), "healthy_deadline too short",
				"An updated instance must stay healthy for min_healthy_time (%s) before healthy_deadline (%s) passes: healthy_deadline must be longer than min_healthy_time.",
				up.MinHealthyTime, up.HealthyDeadline)
		} else {
			l.errorf(minAttr.Expr.Range(), "healthy_deadline too short",
				"An updated instance must stay healthy for min_healthy_time (%s) before healthy_deadline, which defaults to %s, passes; raise healthy_deadline too.",
				up.MinHealthyTime, up.HealthyDeadline)
		}
	}
	if healthyOK && progressOK && up.ProgressDeadline != 0 && up.ProgressDeadline <= up.HealthyDeadline {
		const why = "The deployment fails when no instance becomes healthy for progress_deadline"
		if hasProgress {
			l.errorf(progressAttr.Expr.Range(), "progress_deadline too short",
				"%s (%s), and an updated instance has healthy_deadline (%s) to become healthy: progress_deadline must be longer than healthy_deadline, or \"0s\" to fail the deployment at the first unhealthy instance.",
				why, up.ProgressDeadline, up.HealthyDeadline)
		} else {
			l.errorf(healthyAttr.Expr.Range(), "progress_deadline too short",
				"%s, which defaults to %s, and an updated instance has healthy_deadline (%s) to become healthy; raise progress_deadline too, or set it to \"0s\" to fail the deployment at the first unhealthy instance.",
				why, up.ProgressDeadline, up.HealthyDeadline)
		}
	}

	if attr, ok := attrs["auto_promote"]; ok {
		if v, ok := e.Bool(attr); ok {
			up.AutoPromote = v
			if v && canOK && up.Canary == 0 {
				given := "canary is 0, the default"
				if hasCanary {
					given = "canary = 0"
				}
				l.errorf(attr.NameRange, "auto_promote without canary",
					"auto_promote = true promotes the canaries of %s once all of them are healthy, and %s: there are none. Set canary = 1 or more, or remove auto_promote.", u, given)
			}
		}
	}
	if attr, ok := attrs["auto_revert"]; ok {
		up.AutoRevert, _ = e.Bool(attr)
	}

	// What the count makes of the numbers, and what max_parallel = 0
	// leaves unused.
	rolling := !mpOK || up.MaxParallel > 0
	if rolling && count > 0 && canOK && up.Canary > count {
		l.warnf(canAttr.Expr.Range(), "More canaries than instances",
			"canary = %d, but %s has count = %d: a canary updates in place, in its own slot, so only %d instances can be canaries, and none is left on the old spec while the deployment waits for the promotion. Lower canary to less than count to keep old instances serving.",
			up.Canary, u, count, count)
	}
	if count > 1 && mpOK && up.MaxParallel > count {
		l.warnf(mpAttr.Expr.Range(), "max_parallel above count",
			"max_parallel = %d, but %s has count = %d: an update replaces all %d instances at once, and none is left serving while the new ones start. Lower max_parallel to update a few at a time.",
			up.MaxParallel, u, count, count)
	}
	if !rolling {
		for _, a := range updateSchema.Attributes {
			if attr, ok := attrs[a.Name]; ok && a.Name != "max_parallel" {
				l.warnf(attr.NameRange, "Not used with max_parallel = 0",
					"max_parallel = 0 replaces every instance of %s at once, without a rolling update, so %s is not used. Set max_parallel to 1 or more for a rolling update, or remove %s.",
					u, a.Name, a.Name)
			}
		}
	}
	return up
}

// healthCheck checks the value of an update's health_check.
func (l *loader) healthCheck(attr *hcl.Attribute, s string) bool {
	for _, v := range updateHealthChecks {
		if s == v {
			return true
		}
	}
	hint := didYouMean(s, updateHealthChecks)
	if s == "task_states" {
		hint = ` Nomad's "task_states" is "running" here: an updated instance is healthy once it runs, whatever its checks say.`
	}
	l.errorf(attr.Expr.Range(), "Invalid health_check", "%q is not valid for %q; use %s.%s", s, attr.Name, quotedList(updateHealthChecks), hint)
	return false
}
