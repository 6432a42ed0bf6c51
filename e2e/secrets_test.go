package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/nodeapi"
)

// secretMarker is in every value the secret test writes: no output of
// mariposa may hold it.
const secretMarker = "s3cr3t-MARKER-0b7e"

// TestSecretsNeverLeave renders templates whose data holds a secret
// through every error path of the template engine and the env parser (a
// multi-line value in an env template, a function's error on the value, a
// key named by a value, a range over a value, a JSON parse, an error after
// a good render), with mariposa at -log-level trace, and greps everything
// mariposa publishes for the secret: its log, the audit file, the node
// API's status, events and logs, status -json, Consul's checks and KV.
func TestSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	written := map[string]string{
		"app/secret": secretMarker + "\nsecond line " + secretMarker,
		"app/port":   "port-" + secretMarker,
		"app/next":   "next/" + secretMarker,
		"app/json":   "{" + secretMarker,
		"app/later":  "8080",
	}
	for k, v := range written {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	tmpl := func(name, contents string, env bool) string {
		return fmt.Sprintf(`
service %q {
  command = [%q]
  dir     = %q
  template {
    contents    = %q
    destination = "%s.conf"
    env         = %v
  }
}
`, name, childBin, dir, contents, name, env)
	}
	hcl := writeHCL(t, tmpl("envy", "A=1\n{{ key \"app/secret\" }}\n", true)+
		tmpl("porty", `{{ key "app/port" | parseInt }}`, false)+
		tmpl("nexty", `{{ key (key "app/next") }}`, false)+
		tmpl("rangy", `{{ range key "app/secret" }}{{ end }}`, false)+
		tmpl("jsony", `{{ with $d := key "app/json" | parseJSON }}{{ $d.a }}{{ end }}`, false)+
		tmpl("later", `port={{ key "app/later" | parseInt }}`, false))
	m := startMariposa(t, agent, nil, "-log-level", "trace", "-http-addr", "127.0.0.1:0", "-audit-file", audit, hcl)

	// What each service's supervisor check says: the template, the
	// position and what is wrong.
	want := map[string]string{
		"envy":  `template envy.conf: env line 2 is not KEY=VALUE: it has no "="`,
		"porty": `template porty.conf: contents:1:20: at <parseInt>: error calling parseInt: strconv.ParseInt: invalid syntax`,
		"nexty": `waiting: template nexty.conf needs 1 named by data read from Consul (not shown)`,
		"rangy": `template rangy.conf: contents:1:13: at <"app/secret">: range can't iterate over the value`,
		"jsony": `template jsony.conf: contents:1:31: at <parseJSON>: error calling parseJSON: not valid JSON`,
	}
	// Waited for by what any version of the message says, so that a
	// message that shows the secret fails below, as a leak.
	failed := map[string]string{
		"envy":  "env line 2 is not KEY=VALUE",
		"porty": "parseInt",
		"nexty": "nexty.conf needs ",
		"rangy": "range can't iterate",
		"jsony": "parseJSON",
	}
	for name, w := range failed {
		waitFor(t, 30*time.Second, name+"'s check names the error", func() (bool, string) {
			sc := supervisorCheck(c, name, agent.Name)
			if sc == nil {
				return false, "no supervisor check"
			}
			return strings.Contains(sc.Output, w) && !strings.Contains(sc.Output, `needs key "app/`), sc.Output
		})
	}
	// Every output, each grepped for the marker.
	outputs := map[string]string{}
	base := ""
	waitFor(t, 20*time.Second, "mariposa's HTTP API in its registration", func() (bool, string) {
		svcs, _, err := c.Catalog().Service("mariposa", "", nil)
		if err != nil || len(svcs) == 0 {
			return false, fmt.Sprint(err)
		}
		base = svcs[0].ServiceMeta["http_api"]
		return base != "", fmt.Sprint(svcs[0].ServiceMeta)
	})
	// A template that rendered, then fails: the service keeps running on
	// the last good file; the failed render counts in the metrics.
	waitRunning(t, c, "later", agent.Name)
	if _, err := c.KV().Put(&api.KVPair{Key: "app/later", Value: []byte("later-" + secretMarker)}, nil); err != nil {
		t.Fatal(err)
	}
	written["app/later"] = "later-" + secretMarker
	waitFor(t, 30*time.Second, "later's failed render in /metrics", func() (bool, string) {
		v := sample(scrape(t, base, ""), "mariposa_render_errors_total", map[string]string{"service": "later"})
		return v >= 1, fmt.Sprint(v)
	})
	for _, path := range []string{"/v1/status", "/v1/events?n=1000", "/v1/services"} {
		code, b := get(t, "GET", base+path, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, b)
		}
		outputs["GET "+path] = string(b)
	}
	for name := range want {
		_, b := get(t, "GET", base+"/v1/logs/"+name, "")
		outputs["GET /v1/logs/"+name] = string(b)
	}
	var st nodeapi.Status
	if err := json.Unmarshal([]byte(outputs["GET /v1/status"]), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 0 {
		t.Errorf("a loopback API warns: %q", st.Warnings)
	}
	for _, args := range [][]string{{"status", "-json"}, {"status"}} {
		out, err := exec.Command(mariposaBin, append([]string{args[0], "-consul-addr", agent.HTTPAddr()}, args[1:]...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("mariposa %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		outputs["mariposa "+strings.Join(args, " ")] = string(out)
	}
	checkOut := map[string]string{}
	for name := range want {
		if sc := supervisorCheck(c, name, agent.Name); sc != nil {
			checkOut[name] = sc.Output
		}
	}
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	for id, chk := range checks {
		outputs["agent check "+id] = chk.Name + "\n" + chk.Output + "\n" + chk.Notes
	}
	hc, _, err := c.Health().State(api.HealthAny, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, chk := range hc {
		outputs["catalog check "+chk.CheckID] = chk.Output
	}
	pairs, _, err := c.KV().List("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if _, ours := written[p.Key]; ours {
			continue
		}
		outputs["KV "+p.Key] = p.Key + "\n" + string(p.Value)
	}
	if b, err := os.ReadFile(audit); err != nil {
		t.Fatalf("the audit file: %v", err)
	} else {
		outputs["the audit file"] = string(b)
	}
	// Stop it, so that its log is complete.
	m.stop(t, syscall.SIGTERM, 20*time.Second)
	outputs["mariposa's log"] = m.out.String()

	for where, text := range outputs {
		if strings.Contains(text, secretMarker) || strings.Contains(text, "s3cr3t") {
			t.Errorf("%s shows the secret:\n%s", where, text)
		}
	}
	if t.Failed() {
		return
	}
	// The messages say what is wrong.
	for name, w := range want {
		if !strings.Contains(checkOut[name], w) {
			t.Errorf("%s's check does not say %q: %s", name, w, checkOut[name])
		}
	}
	// The outputs are the ones that would have shown it.
	log := outputs["mariposa's log"]
	for _, w := range []string{"kv.block(app/secret): returned a value of 49 bytes", "[TRACE]", want["porty"]} {
		if !strings.Contains(log, w) {
			t.Errorf("the log does not hold %q", w)
		}
	}
	if !strings.Contains(outputs["GET /v1/status"], "strconv.ParseInt: invalid syntax") {
		t.Errorf("/v1/status does not show the errors:\n%s", outputs["GET /v1/status"])
	}
	if !strings.Contains(outputs["mariposa status -json"], "not valid JSON") {
		t.Errorf("status -json does not show the errors:\n%s", outputs["mariposa status -json"])
	}
	if !strings.Contains(outputs["the audit file"], "later") {
		t.Errorf("the audit file has no event of later:\n%s", outputs["the audit file"])
	}
}

// TestHTTPAPIOpenWarning: an API bound to every interface, next to a
// Consul without ACLs, says in mariposa's liveness check, in GET
// /v1/status and in the log that anyone who reaches it can read logs and
// restart or reset services.
func TestHTTPAPIOpenWarning(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}
`, childBin))
	m := startMariposa(t, agent, nil, "-http-addr", "0.0.0.0:0", hcl)
	const says = "anyone who can reach this address can read this node's status, events and service logs, and restart or reset its services, without a token"
	waitFor(t, 30*time.Second, "the liveness check warns", func() (bool, string) {
		checks, err := c.Agent().Checks()
		if err != nil {
			return false, err.Error()
		}
		for _, chk := range checks {
			if chk.Name == "mariposa liveness" {
				return strings.HasPrefix(chk.Output, "alive\n") && strings.Contains(chk.Output, says) &&
					strings.Contains(chk.Output, "the HTTP API at "), chk.Output
			}
		}
		return false, "no liveness check"
	})
	var port string
	waitFor(t, 20*time.Second, "mariposa's HTTP API in its registration", func() (bool, string) {
		svcs, _, err := c.Catalog().Service("mariposa", "", nil)
		if err != nil || len(svcs) == 0 {
			return false, fmt.Sprint(err)
		}
		port = fmt.Sprint(svcs[0].ServicePort)
		return svcs[0].ServicePort > 0, fmt.Sprint(svcs[0].ServicePort)
	})
	code, b := get(t, "GET", "http://127.0.0.1:"+port+"/v1/status", "")
	var st nodeapi.Status
	if err := json.Unmarshal(b, &st); code != 200 || err != nil {
		t.Fatalf("/v1/status: %d %v %s", code, err, b)
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], says) {
		t.Fatalf("/v1/status warnings %q", st.Warnings)
	}
	waitFor(t, 10*time.Second, "the warning in the log", func() (bool, string) {
		for _, l := range strings.Split(m.out.String(), "\n") {
			if strings.Contains(l, "[WARN]") && strings.Contains(l, "the HTTP API at ") && strings.Contains(l, says) {
				return true, l
			}
		}
		return false, ""
	})
}
