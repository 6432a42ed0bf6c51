package checks

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestRegistration(t *testing.T) {
	svc := &schema.Service{
		Name: "web", Port: 8080, Address: "10.0.0.1", Tags: []string{"v1"}, Version: "1.4.2",
		Meta: map[string]string{"team": "storefront"},
		Checks: []*schema.Check{
			{Name: "http", Kind: schema.CheckHTTP, Target: "http://127.0.0.1:8080/", Interval: 2 * time.Second, Timeout: time.Second,
				SuccessBeforePassing: 2, FailuresBeforeCritical: 3, DeregisterCriticalAfter: 10 * time.Minute},
			{Name: "tcp", Kind: schema.CheckTCP, Target: "127.0.0.1:8080", Interval: 10 * time.Second, Timeout: 5 * time.Second},
			{Name: "grpc", Kind: schema.CheckGRPC, Target: "127.0.0.1:9090/health", Interval: 10 * time.Second, Timeout: 5 * time.Second},
			{Name: "ttl", Kind: schema.CheckTTL, TTL: 15 * time.Second},
			{Name: "script", Kind: schema.CheckArgs, Args: []string{"/bin/check", "-v"}, Interval: 10 * time.Second, Timeout: 3 * time.Second},
		},
	}
	reg := Registration(svc, "n1", RegOptions{SupervisorTTL: 30 * time.Second, Status: api.HealthPassing,
		ExtraTags: []string{"leader"}, ExtraMeta: map[string]string{"leader": "leader"}, LivenessServiceID: "mariposa-n1"})
	if reg.ID != "web-n1" || reg.Name != "web" || reg.Port != 8080 || reg.Address != "10.0.0.1" {
		t.Fatalf("service: %+v", reg)
	}
	if len(reg.Tags) != 2 || reg.Tags[0] != "v1" || reg.Tags[1] != "leader" {
		t.Errorf("tags %v", reg.Tags)
	}
	for k, v := range map[string]string{"managed-by": "mariposa", "version": "1.4.2", "team": "storefront", "leader": "leader"} {
		if reg.Meta[k] != v {
			t.Errorf("meta %s = %q, want %q", k, reg.Meta[k], v)
		}
	}
	byID := map[string]*api.AgentServiceCheck{}
	for _, c := range reg.Checks {
		byID[c.CheckID] = c
	}
	cases := []struct {
		id   string
		want api.AgentServiceCheck
	}{
		{"web-n1:http", api.AgentServiceCheck{Name: "http", HTTP: "http://127.0.0.1:8080/", Interval: "2s", Timeout: "1s",
			SuccessBeforePassing: 2, FailuresBeforeCritical: 3, DeregisterCriticalServiceAfter: "10m0s"}},
		{"web-n1:tcp", api.AgentServiceCheck{Name: "tcp", TCP: "127.0.0.1:8080", Interval: "10s", Timeout: "5s"}},
		{"web-n1:grpc", api.AgentServiceCheck{Name: "grpc", GRPC: "127.0.0.1:9090/health", Interval: "10s", Timeout: "5s"}},
		{"web-n1:ttl", api.AgentServiceCheck{Name: "ttl", TTL: "15s"}},
		// args: a TTL check fed by mariposa, TTL = 2 x interval + timeout.
		{"web-n1:script", api.AgentServiceCheck{Name: "script", TTL: "23s", Notes: `Run by mariposa: check (args check "script", every 10s); arguments not shown.`}},
		{"web-n1:mariposa-alive", api.AgentServiceCheck{Name: "mariposa alive", AliasService: "mariposa-n1",
			Notes: "Mirrors the health of the mariposa supervising this service."}},
	}
	for _, c := range cases {
		got, ok := byID[c.id]
		if !ok {
			t.Errorf("no check %s", c.id)
			continue
		}
		want := c.want
		want.CheckID = c.id
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("check %s:\n got %+v\nwant %+v", c.id, *got, want)
		}
	}
	sup := reg.Checks[len(reg.Checks)-1]
	if sup.CheckID != "web-n1:mariposa" || sup.Name != "mariposa supervisor" || sup.TTL != "30s" || sup.Status != api.HealthPassing {
		t.Errorf("the supervisor check must come last: %+v", sup)
	}
	if len(reg.Checks) != 7 {
		t.Errorf("%d checks, want 7", len(reg.Checks))
	}
	if id := ServiceID(&schema.Service{Name: "web", ID: "web-custom"}, "n1"); id != "web-custom" {
		t.Errorf("explicit id: %s", id)
	}
}

// Notes are shown to everyone who can read the catalog: an args check's
// arguments (where secrets get passed) must never be in them.
func TestArgsCheckNotesHideArguments(t *testing.T) {
	cases := []struct {
		args []string
		prog string
	}{
		{[]string{"/usr/local/bin/check-db", "--password", "hunter2"}, "check-db"},
		{[]string{"sh", "-c", "curl -fsu admin:hunter2 http://127.0.0.1/"}, "sh"},
		{[]string{"./bin/check", "hunter2"}, "check"},
		{[]string{"check-web", "--token=hunter2"}, "check-web"},
	}
	for _, c := range cases {
		svc := &schema.Service{Name: "web", Checks: []*schema.Check{
			{Name: "deep", Kind: schema.CheckArgs, Args: c.args, Interval: 2 * time.Second, Timeout: time.Second},
		}}
		notes := Registration(svc, "n1", RegOptions{SupervisorTTL: time.Minute}).Checks[0].Notes
		want := `Run by mariposa: ` + c.prog + ` (args check "deep", every 2s); arguments not shown.`
		if notes != want {
			t.Errorf("%q: notes %q, want %q", c.args, notes, want)
		}
		for _, a := range c.args[1:] {
			if strings.Contains(notes, a) || strings.Contains(notes, "hunter2") {
				t.Errorf("%q: notes %q show argument %q", c.args, notes, a)
			}
		}
	}
}

// A check that leaves out its host (and port) probes the service's
// registered address and port: the service's address, else the node's
// (what the child gets as MARIPOSA_ADDRESS).
func TestTargetOnService(t *testing.T) {
	own := &schema.Service{Name: "web", Port: 8080, Address: "10.0.0.1"}
	bare := &schema.Service{Name: "web", Port: 8080}
	v6 := &schema.Service{Name: "web", Port: 8080, Address: "fd00::1"}
	for _, tc := range []struct {
		svc    *schema.Service
		kind   schema.CheckKind
		target string
		want   string
	}{
		{own, schema.CheckHTTP, "/health", "http://10.0.0.1:8080/health"},
		{bare, schema.CheckHTTP, "/health?full=1", "http://10.0.0.5:8080/health?full=1"},
		{v6, schema.CheckHTTP, "/", "http://[fd00::1]:8080/"},
		{bare, schema.CheckTCP, "", "10.0.0.5:8080"},
		{own, schema.CheckTCP, ":9000", "10.0.0.1:9000"},
		{v6, schema.CheckTCP, "", "[fd00::1]:8080"},
		// Given in full: as written.
		{own, schema.CheckHTTP, "http://127.0.0.1:9/x", "http://127.0.0.1:9/x"},
		{own, schema.CheckTCP, "127.0.0.1:9", "127.0.0.1:9"},
		{own, schema.CheckGRPC, "127.0.0.1:9/h", "127.0.0.1:9/h"},
	} {
		c := &schema.Check{Name: "c", Kind: tc.kind, Target: tc.target, Interval: time.Second, Timeout: time.Second}
		if got := Target(c, tc.svc, "10.0.0.5"); got != tc.want {
			t.Errorf("%s %q on %q: %q, want %q", tc.kind, tc.target, tc.svc.Address, got, tc.want)
		}
		svc := *tc.svc
		svc.Checks = []*schema.Check{c}
		reg := Registration(&svc, "n1", RegOptions{SupervisorTTL: time.Minute, NodeAddress: "10.0.0.5"})
		if got := reg.Checks[0].HTTP + reg.Checks[0].TCP + reg.Checks[0].GRPC; got != tc.want {
			t.Errorf("registered %s %q: %q, want %q", tc.kind, tc.target, got, tc.want)
		}
	}
}
