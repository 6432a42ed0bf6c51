package placement

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	version "github.com/hashicorp/go-version"

	"github.com/mariposa-sh/mariposa/schema"
)

// Node attributes of constraints, affinities and spreads.
const (
	AttrNodeName        = "node.name"
	AttrNodeDatacenter  = "node.datacenter"
	AttrNodeMetaPrefix  = "node.meta."
	AttrMariposaVersion = "mariposa.version"
	AttrServicePrefix   = "service."
)

// Attr returns the value of attribute on node n and whether it is set
// there. err is set for an attribute mariposa does not know (never for one
// that is merely unset). "${node.name}" is accepted for "node.name".
//
//   - node.name, node.datacenter, mariposa.version: set when not empty.
//   - node.meta.<key>: set when the key is in the node's meta, even with an
//     empty value.
//   - service.<name>: set when at least one instance of the service is
//     registered on the node; the value is how many, in decimal.
func Attr(n NodeInfo, attribute string) (value string, set bool, err error) {
	a := TrimAttr(attribute)
	switch {
	case a == AttrNodeName:
		return n.Name, n.Name != "", nil
	case a == AttrNodeDatacenter:
		return n.Datacenter, n.Datacenter != "", nil
	case a == AttrMariposaVersion:
		return n.MariposaVersion, n.MariposaVersion != "", nil
	case strings.HasPrefix(a, AttrNodeMetaPrefix) && len(a) > len(AttrNodeMetaPrefix):
		v, ok := n.Meta[a[len(AttrNodeMetaPrefix):]]
		return v, ok, nil
	case strings.HasPrefix(a, AttrServicePrefix) && len(a) > len(AttrServicePrefix):
		c := n.Services[a[len(AttrServicePrefix):]]
		if c <= 0 {
			return "", false, nil
		}
		return strconv.Itoa(c), true, nil
	}
	return "", false, fmt.Errorf("unknown attribute %q (node.name, node.datacenter, node.meta.<key>, mariposa.version, service.<name>)", attribute)
}

// TrimAttr strips blanks and an interpolation wrapper: "${node.name}".
func TrimAttr(a string) string {
	a = strings.TrimSpace(a)
	if strings.HasPrefix(a, "${") && strings.HasSuffix(a, "}") {
		a = strings.TrimSpace(a[2 : len(a)-1])
	}
	return a
}

func isServiceAttr(a string) bool {
	return strings.HasPrefix(TrimAttr(a), AttrServicePrefix)
}

// matcher evaluates operators, compiling each regexp and version constraint
// once per ranking rather than once per node.
type matcher struct {
	re  map[string]*regexp.Regexp
	ver map[string]version.Constraints
	err map[string]error // by operator + "\x00" + value
}

func newMatcher() *matcher {
	return &matcher{re: map[string]*regexp.Regexp{}, ver: map[string]version.Constraints{}, err: map[string]error{}}
}

// holds says whether the rule (attribute op want) holds for a node where the
// attribute is (value, set). err: the rule itself is broken (bad operator,
// regexp or version constraint), whatever the node.
//
// Missing attributes fail every operator but != and is_not_set, as in
// Nomad. On service.<name>, == and != with no value mean "runs on the node"
// and "does not". The affinity operators ==~ and !=~ both test equality
// here; the affinity score gives !=~ its negative weight.
func (m *matcher) holds(attribute, op, want, value string, set bool) (bool, error) {
	switch op {
	case schema.OpEqual, "=", schema.OpPrefer, schema.OpAvoid:
		if want == "" && isServiceAttr(attribute) {
			return set, nil
		}
		return set && value == want, nil
	case schema.OpNotEqual:
		if want == "" && isServiceAttr(attribute) {
			return !set, nil
		}
		return !(set && value == want), nil
	case schema.OpIsSet:
		return set, nil
	case schema.OpIsNotSet:
		return !set, nil
	case schema.OpRegexp:
		re, err := m.regexp(want)
		if err != nil {
			return false, err
		}
		return set && re.MatchString(value), nil
	case schema.OpVersion:
		c, err := m.version(want)
		if err != nil {
			return false, err
		}
		if !set {
			return false, nil
		}
		v, verr := version.NewVersion(strings.TrimSpace(value))
		return verr == nil && c.Check(v), nil
	case schema.OpSetContains:
		return set && setContains(value, want), nil
	}
	return false, fmt.Errorf("unknown operator %q", op)
}

func (m *matcher) regexp(want string) (*regexp.Regexp, error) {
	if re, ok := m.re[want]; ok {
		return re, nil
	}
	key := schema.OpRegexp + "\x00" + want
	if err, ok := m.err[key]; ok {
		return nil, err
	}
	re, err := regexp.Compile(want)
	if err != nil {
		err = fmt.Errorf("invalid regexp %q: %v", want, err)
		m.err[key] = err
		return nil, err
	}
	m.re[want] = re
	return re, nil
}

func (m *matcher) version(want string) (version.Constraints, error) {
	if c, ok := m.ver[want]; ok {
		return c, nil
	}
	key := schema.OpVersion + "\x00" + want
	if err, ok := m.err[key]; ok {
		return nil, err
	}
	c, err := version.NewConstraint(want)
	if err != nil {
		err = fmt.Errorf("invalid version constraint %q: %v", want, err)
		m.err[key] = err
		return nil, err
	}
	m.ver[want] = c
	return c, nil
}

// setContains: every comma-separated item of want is among the
// comma-separated items of value (blanks around items ignored).
func setContains(value, want string) bool {
	have := map[string]bool{}
	for _, s := range strings.Split(value, ",") {
		have[strings.TrimSpace(s)] = true
	}
	for _, s := range strings.Split(want, ",") {
		if s = strings.TrimSpace(s); s != "" && !have[s] {
			return false
		}
	}
	return true
}

// check evaluates one rule on node n: whether it holds, and why not in
// words when it does not (or when it is broken).
func (m *matcher) check(n NodeInfo, attribute, op, want string) (ok bool, why string) {
	value, set, err := Attr(n, attribute)
	if err != nil {
		return false, err.Error()
	}
	ok, err = m.holds(attribute, op, want, value, set)
	if err != nil {
		return false, TrimAttr(attribute) + ": " + err.Error()
	}
	if ok {
		return true, ""
	}
	have := TrimAttr(attribute) + " not set"
	if set {
		have = fmt.Sprintf("%s = %q", TrimAttr(attribute), value)
	}
	rule := op
	if want != "" || (op != schema.OpIsSet && op != schema.OpIsNotSet && !isServiceAttr(attribute)) {
		rule = fmt.Sprintf("%s %q", op, want)
	}
	return false, have + " fails " + rule
}
