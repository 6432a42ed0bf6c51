package render

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"

	dep "github.com/hashicorp/consul-template/dependency"
	ctemplate "github.com/hashicorp/consul-template/template"
	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// marker is the secret of these tests: no message may hold it.
const marker = "MARKER-s3cr3t-5d1e"

// markerBrain holds the data the secret tests' templates read: every value
// holds the marker.
func markerBrain(t *testing.T) *ctemplate.Brain {
	t.Helper()
	brain := ctemplate.NewBrain()
	kv := func(k, v string) {
		d, err := dep.NewKVGetQuery(k)
		if err != nil {
			t.Fatal(err)
		}
		d.EnableBlocking()
		brain.Remember(d, v)
	}
	kv("app/secret", marker+"\nsecond line "+marker)
	kv("app/path", "conf/"+marker)
	kv("app/name", marker)
	l, err := dep.NewKVListQuery("app/list")
	if err != nil {
		t.Fatal(err)
	}
	brain.Remember(l, []*dep.KeyPair{{Key: "a", Value: marker}})
	return brain
}

// TestExecErrorsNeverShowData runs templates through the real engine into
// every kind of execution error with a secret in the data: the message
// names the template's position, the action and what went wrong, never the
// value.
func TestExecErrorsNeverShowData(t *testing.T) {
	sb, _ := newSandbox(t)
	brain := markerBrain(t)
	cases := []struct {
		text string
		want string // in the message
	}{
		{`{{ key "app/secret" | parseInt }}`, `contents:1:22: at <parseInt>: error calling parseInt: strconv.ParseInt: invalid syntax`},
		{`{{ key "app/secret" | parseUint }}`, `error calling parseUint: strconv.ParseUint: invalid syntax`},
		{`{{ key "app/secret" | parseFloat }}`, `error calling parseFloat: strconv.ParseFloat: invalid syntax`},
		{`{{ key "app/secret" | parseBool }}`, `error calling parseBool: strconv.ParseBool: invalid syntax`},
		{`{{ key "app/secret" | parseJSON }}`, `error calling parseJSON: not valid JSON`},
		{"x\n{{ with $d := key \"app/secret\" | parseJSON }}{{ end }}", `contents:2:33: at <parseJSON>: error calling parseJSON: not valid JSON`},
		{`{{ key "app/secret" | parseYAML }}{{ "a: [" | parseYAML }}`, `error calling parseYAML: not valid YAML`},
		{`{{ key "app/secret" | base64Decode }}`, `error calling base64Decode: not valid base64`},
		{`{{ key "app/secret" | base64URLDecode }}`, `error calling base64URLDecode: not valid base64`},
		{`{{ range key "app/secret" }}{{ end }}`, `range can't iterate over the value (not shown`},
		{`{{ range ls "app/list" }}{{ range .Value }}{{ end }}{{ end }}`, `range can't iterate over the value`},
		{`{{ file (key "app/path") }}`, `error calling file: no such file or directory`},
		{`{{ mustEnv (key "app/name") }}`, `error calling mustEnv: a required environment variable is empty`},
		{`{{ service (key "app/secret") }}`, `error calling service: failed (its message is not shown`},
		{`{{ key "app/secret" | regexMatch "(" }}`, `error calling regexMatch: error parsing regexp: missing closing )`},
		{`{{ "x" | regexMatch (printf "(%s" (key "app/secret")) }}`, `error calling regexMatch: error parsing regexp: missing closing )`},
		{`{{ (key "app/secret").Foo }}`, `can't evaluate field Foo in type string`},
		{`{{ index (key "app/secret") 99 }}`, `error calling index: index out of range`},
		{`{{ eq (key "app/secret") 1 }}`, `error calling eq: incompatible types for comparison`},
		{`{{ key "app/secret" | sprig_mustFromJson }}`, `error calling sprig_mustFromJson:`},
		{`{{ key "app/secret" | sprig_mustRegexFind "(" }}`, `error calling sprig_mustRegexFind:`},
		{`{{ key "app/secret" | sprig_fail }}`, `error calling sprig_fail: failed (its message is not shown`},
		{`{{ key "app/secret" | plugin }}`, `function "plugin" is not available in mariposa templates`},
	}
	for _, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			ct, err := ctemplate.NewTemplate(&ctemplate.NewTemplateInput{Contents: c.text, ExtFuncMap: sb.funcs()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = ct.Execute(&ctemplate.ExecuteInput{Brain: brain})
			if err == nil {
				t.Fatal("no error")
			}
			msg := execMessage("contents", err)
			if strings.Contains(msg, "MARKER") || strings.Contains(msg, "s3cr3t") {
				t.Fatalf("the message shows the secret: %q\n(engine: %v)", msg, err)
			}
			if !strings.Contains(msg, c.want) {
				t.Fatalf("message %q; want it to hold %q\n(engine: %v)", msg, c.want, err)
			}
		})
	}
}

// TestExecMessageTable: the rewrite of error texts as the engine writes
// them (these are its texts: the vendored and the upstream consul-template
// write the same).
func TestExecMessageTable(t *testing.T) {
	pre := `execute: template: :3:7: executing "" at <f>: `
	cases := []struct{ in, want string }{
		{pre + `error calling f: f: strconv.ParseInt: parsing "` + marker + `": value out of range`, `web.tpl:3:7: at <f>: error calling f: strconv.ParseInt: value out of range (the value is not shown)`},
		{pre + "range can't iterate over " + marker, `web.tpl:3:7: at <f>: range can't iterate over the value (not shown: it may be data read from Consul)`},
		{pre + `can't use ` + marker + ` to iterate over more than one variable`, `web.tpl:3:7: at <f>: failed (its message is not shown: it may quote data read from Consul)`},
		{pre + `error calling f: ` + marker, `web.tpl:3:7: at <f>: error calling f: failed (its message is not shown: it may quote data read from Consul)`},
		{pre + `error calling f: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str ` + "`" + marker + "`", `error calling f: not valid YAML`},
		{pre + `error calling f: file "` + marker + `": outside the service directory /srv/web`, `error calling f: outside the service directory /srv/web`},
		{pre + `error calling f: file "a\": no such file or directory` + marker + `": permission denied`, `error calling f: permission denied`},
		{pre + `wrong type for value; expected string; got map[string]interface {}`, `at <f>: wrong type for value; expected string; got map[string]interface {}`},
		{pre + `map has no entry for key "` + marker + `"`, `at <f>: failed (its message`},
		{`something else: ` + marker, `rendering failed (its message is not shown: it may quote data read from Consul)`},
	}
	for _, c := range cases {
		got := execMessage("web.tpl", fmt.Errorf("%s", c.in))
		if strings.Contains(got, marker) || !strings.Contains(got, c.want) {
			t.Errorf("execMessage(%q)\n = %q\nwant it to hold %q and not the marker", c.in, got, c.want)
		}
	}
}

// TestEnvErrorsNeverShowLine: an env template's bad line is named by its
// number and what is wrong with it, never shown.
func TestEnvErrorsNeverShowLine(t *testing.T) {
	cases := []struct{ out, want string }{
		{"A=1\n" + marker + "\n", `env line 2 is not KEY=VALUE: it has no "=" (the line is not shown)`},
		{"A=1\n\n# c\nsecond line " + marker + "=x\n", `env line 4 is not KEY=VALUE: the name before "=" is not a valid variable name (the line is not shown)`},
		{"1" + marker + "=x", `env line 1 is not KEY=VALUE: the name before "="`},
	}
	for _, c := range cases {
		_, err := parseEnv([]byte(c.out))
		if err == nil {
			t.Fatalf("parseEnv(%q) accepted", c.out)
		}
		if strings.Contains(err.Error(), "MARKER") || err.Error() != c.want && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("parseEnv(%q) = %q; want %q", c.out, err, c.want)
		}
	}
}

// TestStdLogLinesRedacted: consul-template's log lines lose every quoted
// string (a value returned becomes its size); names, URLs and counts stay.
func TestStdLogLinesRedacted(t *testing.T) {
	cases := []struct{ in, want string }{
		{fmt.Sprintf("[TRACE] kv.block(app/secret): returned %q\n", marker+"\n"), "[TRACE] kv.block(app/secret): returned a value of 19 bytes\n"},
		{"[TRACE] kv.block(app/secret): GET /v1/kv/app/secret?index=12&stale=true&wait=5m0s\n", "[TRACE] kv.block(app/secret): GET /v1/kv/app/secret?index=12&stale=true&wait=5m0s\n"},
		{"[TRACE] kv.list(app/): returned 3 pairs\n", "[TRACE] kv.list(app/): returned 3 pairs\n"},
		{fmt.Sprintf("[WARN] catalog.node(x): no node exists with the name %q\n", marker), "[WARN] catalog.node(x): no node exists with the name [18 bytes not shown]\n"},
		{`[TRACE] x: "unterminated ` + marker + "\n", "[TRACE] x: [rest not shown]\n"},
	}
	for _, c := range cases {
		if got := redactStdLine(c.in); got != c.want {
			t.Errorf("redactStdLine(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

// syncBuffer is a log output that tests read while the logger writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretsNeverInStateOrLog: a manager at trace level against a real
// agent renders templates that fail in every way with secrets in the data
// (a function's error, an env line, a value used as a key's name, a range
// over a value): the service's state (what status, events and checks
// show) and the whole log name the templates and keys, never a value.
func TestSecretsNeverInStateOrLog(t *testing.T) {
	a, c := newAgent(t)
	var buf syncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Trace, Output: &buf})
	m := NewManager(&api.Config{Address: a.HTTPAddr()}, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	put(t, c, "app/secret", marker+"\nsecond line "+marker)
	put(t, c, "app/port", "port-"+marker)
	put(t, c, "app/next", "next/"+marker)
	dir := t.TempDir()
	svc := templateService(dir, "web",
		`{{ key (key "app/next") }}`,
		`{{ key "app/port" | parseInt }}`,
		"A=1\n{{ key \"app/secret\" }}\n",
		`{{ range key "app/secret" }}{{ end }}`,
		`{{ with $d := key "app/secret" | parseJSON }}{{ end }}`,
	)
	svc.Templates[2].Env = true
	f := follow(m.Service(svc))
	st := f.until(t, "four errors and a wait", func(s ServiceState) bool {
		return len(s.Errors) == 4 && strings.Contains(s.Waiting, "named by data")
	})
	all := strings.Join(st.Errors, "\n") + "\n" + st.Waiting
	if strings.Contains(all, "MARKER") || strings.Contains(all, "s3cr3t") {
		t.Fatalf("the state shows the secret:\n%s", all)
	}
	for _, want := range []string{
		`template web-c.conf: env line 2 is not KEY=VALUE`,
		`template web-b.conf: contents:1:20: at <parseInt>: error calling parseInt: strconv.ParseInt: invalid syntax`,
		`template web-d.conf: contents:1:13: at <"app/secret">: range can't iterate over the value`,
		`template web-e.conf: contents:1:33: at <parseJSON>: error calling parseJSON: not valid JSON`,
		`waiting: template web-a.conf needs 1 named by data read from Consul (not shown)`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the state does not say %q:\n%s", want, all)
		}
	}
	// The trace saw every value come back: as sizes.
	log.Printf("[TRACE] test: flush") // the std logger's lines are synchronous
	out := buf.String()
	if strings.Contains(out, "MARKER") || strings.Contains(out, "s3cr3t") {
		t.Fatalf("the log shows the secret:\n%s", out)
	}
	if !strings.Contains(out, "kv.block(app/port): returned a value of") {
		t.Fatalf("the trace does not summarise the values it got:\n%s", out)
	}
}
