package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Spec is a reified deployment: what `mariposa deploy` writes to
// deploy/<name>/spec/<n>. Reified means nothing in it depends on the machine
// it was deployed from: variables are resolved (the loader did it) and
// template sources are inlined. Its hash covers the services and groups, so
// deploying the same files twice is a no-op.
type Spec struct {
	// Format is the spec format's version (SpecFormat when written); a
	// node refuses a spec of a newer format than it reads, rather than
	// run it half understood. Absent: format 1.
	Format   int               `json:"format,omitempty"`
	Name     string            `json:"name"`
	N        uint64            `json:"n"`
	Hash     string            `json:"hash"`
	By       string            `json:"by,omitempty"`
	At       time.Time         `json:"at"`
	Services []*schema.Service `json:"services"`
	Groups   []*schema.Group   `json:"groups,omitempty"`
}

// SpecFormat is the newest spec format this mariposa reads. A spec is
// written with the oldest format that holds it, so that nodes not upgraded
// yet go on running specs they understand:
//
//	1  everything but what format 2 adds
//	2  a template with coordinate { max_parallel } (an older node would
//	   ignore the block and reload every instance at once)
//	3  a volume block (an older node would run the slot without its data,
//	   and hand nothing off when it moves)
const SpecFormat = 3

// formatOf is the oldest format that holds sp.
func formatOf(sp *Spec) int {
	for _, svc := range sp.Services {
		if svc.Placement != nil && len(svc.Placement.Volumes) > 0 {
			return 3
		}
	}
	for _, g := range sp.Groups {
		if g.Placement != nil && len(g.Placement.Volumes) > 0 {
			return 3
		}
	}
	for _, svc := range sp.Services {
		for _, t := range svc.Templates {
			if t.Coordinate != nil {
				return 2
			}
		}
	}
	return 1
}

// Desired is deploy/<name>/desired: the spec the fleet runs.
type Desired struct {
	N    uint64    `json:"n"`
	Hash string    `json:"hash"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// maxValue is Consul's limit on a KV value.
const maxValue = 512 << 10

// Reify turns a loaded configuration into a spec body: template sources
// read into their contents, paths of the deploying machine dropped. Every
// service must be a cluster unit (have a count, or be in a group with one).
func Reify(name string, cfg *schema.Config) (*Spec, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("deployment name %q: use letters, digits, '-' and '_'", name)
	}
	sp := &Spec{Format: SpecFormat, Name: name}
	var errs []error
	for _, svc := range cfg.Services {
		if svc.Placement == nil {
			errs = append(errs, fmt.Errorf("%s: service %q has no count: a deployed service runs in count slots across the fleet; add count = N (or put it in a group with a count)", svc.SourceFile, svc.Name))
			continue
		}
		c := *svc
		c.Templates = nil
		for _, t := range svc.Templates {
			tc := *t
			if tc.Source != "" {
				path := tc.Source
				if !filepath.IsAbs(path) {
					path = filepath.Join(svc.SourceDir, path)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					errs = append(errs, fmt.Errorf("service %q: template source: %w", svc.Name, err))
					continue
				}
				tc.Contents, tc.Source = string(b), ""
			}
			c.Templates = append(c.Templates, &tc)
		}
		c.SourceFile, c.SourceDir = "", ""
		sp.Services = append(sp.Services, &c)
	}
	for _, g := range cfg.Groups {
		gc := *g
		sp.Groups = append(sp.Groups, &gc)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sp.Format = formatOf(sp)
	sp.Hash = HashOf(sp)
	return sp, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// HashOf hashes what runs: the services and groups, not who deployed when
// (what Spec.Hash records).
func HashOf(sp *Spec) string {
	b, _ := json.Marshal(struct {
		S []*schema.Service
		G []*schema.Group
	}{sp.Services, sp.Groups})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// Encode is the spec as stored.
func (sp *Spec) Encode() ([]byte, error) {
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, err
	}
	if len(b) > maxValue {
		return nil, fmt.Errorf("the spec is %d KiB; Consul keeps at most 512 KiB in a key: split the deployment", len(b)>>10)
	}
	return b, nil
}

// DecodeSpec reads a stored spec and checks what the node relies on. Any
// input gives a spec or an error, never a panic: values under mariposa/
// may have been written by hand.
func DecodeSpec(b []byte) (*Spec, error) {
	var sp Spec
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("not a mariposa spec: %w", err)
	}
	if sp.Format > SpecFormat {
		return nil, fmt.Errorf("spec %d of %q was written by a newer mariposa (spec format %d; this mariposa reads up to %d): upgrade this node's mariposa",
			sp.N, sp.Name, sp.Format, SpecFormat)
	}
	seen := map[string]bool{}
	for i, svc := range sp.Services {
		if svc == nil || !validName.MatchString(svc.Name) {
			return nil, fmt.Errorf("service %d has no valid name", i)
		}
		if seen[svc.Name] {
			return nil, fmt.Errorf("service %q appears twice", svc.Name)
		}
		seen[svc.Name] = true
		if len(svc.Command) == 0 {
			return nil, fmt.Errorf("service %q has no command", svc.Name)
		}
		if svc.Placement == nil || svc.Placement.Count < 0 || svc.Placement.Count > maxCount {
			return nil, fmt.Errorf("service %q has no valid count", svc.Name)
		}
		for _, t := range svc.Templates {
			if t == nil || t.Destination == "" {
				return nil, fmt.Errorf("service %q has a template without a destination", svc.Name)
			}
		}
		for _, c := range svc.Checks {
			if c == nil {
				return nil, fmt.Errorf("service %q has an empty check", svc.Name)
			}
		}
		for _, d := range svc.Depends {
			if d == nil {
				return nil, fmt.Errorf("service %q has an empty dependency", svc.Name)
			}
		}
		for _, c := range svc.Placement.Constraints {
			if c == nil {
				return nil, fmt.Errorf("service %q has an empty constraint", svc.Name)
			}
		}
		for _, a := range svc.Placement.Affinities {
			if a == nil {
				return nil, fmt.Errorf("service %q has an empty affinity", svc.Name)
			}
		}
		for _, s := range svc.Placement.Spreads {
			if s == nil {
				return nil, fmt.Errorf("service %q has an empty spread", svc.Name)
			}
		}
	}
	for i, g := range sp.Groups {
		if g == nil || !validName.MatchString(g.Name) {
			return nil, fmt.Errorf("group %d has no valid name", i)
		}
	}
	seenP := map[*schema.Placement]bool{}
	for _, svc := range sp.Services {
		updateDefaults(svc.Placement, seenP)
	}
	for _, g := range sp.Groups {
		updateDefaults(g.Placement, seenP)
	}
	return &sp, nil
}

// updateDefaults gives a placement decoded without an update block (a
// spec written before the block existed: all zero, which the language
// never produces, since healthy_deadline must be positive) the block's
// defaults, as the language gives a unit that has none.
func updateDefaults(p *schema.Placement, seen map[*schema.Placement]bool) {
	if p == nil || seen[p] || p.Update != (schema.Update{}) {
		return
	}
	seen[p] = true
	p.Update = schema.Update{MaxParallel: schema.DefaultUpdateMaxParallel, HealthCheck: schema.UpdateChecks,
		MinHealthyTime: schema.DefaultUpdateMinHealthyTime, HealthyDeadline: schema.DefaultUpdateHealthyDeadline,
		ProgressDeadline: schema.DefaultUpdateProgressDeadline}
}

// maxCount bounds count: a slot is a key and an instance.
const maxCount = 10000

// Units lists the spec's cluster units: each group with a count (its
// members share its slots) and each lone service.
func (sp *Spec) Units() []UnitSpec {
	return unitsOf(sp.Services, sp.Groups)
}

// UnitSpec is a unit and the services that run in each of its slots.
type UnitSpec struct {
	Unit     placement.Unit
	Services []*schema.Service
}

func unitsOf(services []*schema.Service, groups []*schema.Group) []UnitSpec {
	var out []UnitSpec
	idx := map[string]int{}
	for _, svc := range services {
		if svc.Placement == nil {
			continue
		}
		name := svc.Name
		if svc.Group != "" {
			name = svc.Group
		}
		if i, ok := idx[name]; ok {
			out[i].Services = append(out[i].Services, svc)
			continue
		}
		idx[name] = len(out)
		out = append(out, UnitSpec{Unit: placement.Unit{Name: name, Placement: svc.Placement, HasVolume: keepsData(svc.Placement)}, Services: []*schema.Service{svc}})
	}
	_ = groups
	for i := range out {
		out[i].Unit.Resources = placement.ReservationOf(out[i].Services)
	}
	return out
}

// keepsData says whether a placement has a volume whose data stays with
// the node or moves at a cost (handoff "sticky" or "snapshot"): its slots
// prefer the node that held them last.
func keepsData(p *schema.Placement) bool {
	for _, v := range p.Volumes {
		if v.Handoff != schema.HandoffNone {
			return true
		}
	}
	return false
}

// slotName is slot k of unit as "<unit>/<k>".
func slotName(unit string, k int) string { return fmt.Sprintf("%s/%d", unit, k) }

func count(u UnitSpec) int {
	if u.Unit.Placement == nil {
		return 0
	}
	return u.Unit.Placement.Count
}
