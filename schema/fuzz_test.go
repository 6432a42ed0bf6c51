package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzSeeds are malformed inputs on top of every fixture file.
func fuzzSeeds() []string {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	deepObj := strings.Repeat("{a=", 5000) + "1" + strings.Repeat("}", 5000)
	return []string{
		"",
		"service",
		`service "a" {`,
		`service "a" { command = ["x"`,
		"service \"a\" {\n  command = <<EOT\nnever ends\n",
		"service \"a\" {\n  command = [<<-EOT\n  x\n  EOT\n  ]\n}\n",
		"service \"a\x00\" { command = [\"\x00\"] }",
		"service \"\xff\xfe\" { command = [\"\xc3\x28\"] }",
		"\xEF\xBB\xBFservice \"a\" {\r\n  command = [\"x\"]\r\n}\r\n",
		"service \"a\" {\r\n  command = [\"x\"]\r\n  port = 1\r\n}",
		`service "a" { command = ["` + strings.Repeat("x", 20000) + `"] }`,
		"x = " + deep,
		"service \"a\" { command = " + deep + " }",
		"service \"a\" { env = " + deepObj + " }",
		strings.Repeat("service \"a\" {\n", 2000),
		`service "a" { command = ["x"] port = 1 }`,
		`service "a" { command = ["${`,
		`service "a" { command = [for x in [1] : x] }`,
		`service "a" { command = [upper(var.x)] }`,
		`variable "x" { type = list(map(object({a=string}))) }`,
		`variable "x" { default = [null] } service "a" { command = var.x }`,
		`service "a" { command = ["x"] port = 1e999999 }`,
		`service "a" { command = ["x"] port = -1e999999 }`,
		`service "a" { command = ["x"] tags = range(1e9) }`,
		`service "a" { command = ["x"] check "c" { ttl = 10 } }`,
		`service "a" { command = ["x"] template { wait = { min = null } destination = "x" contents = "" } }`,
		`service "a" { command = ["x"] meta = { for i in range(100) : "k${i}" => i } }`,
		`service "a" { command = ["x"] env = { a = [1] } }`,
		`service "a" { command = ["x"] version = file("fuzz.hcl") }`,
		`service "a" { command = ["x"] version = file("..") }`,
		`service "a" { command = ["x"] version = try(jsondecode("{"), "x") }`,
		`service "a" { command = [tostring(null)] }`,
		`service "a" { command = [sensitive("x")] }`,
		`group "g" { group "h" {} service "a" { command = ["x"] depends_on "a" {} } }`,
		// placement
		`service "a" { command = ["x"] count = 1e99 max_per_node = -1e99 }`,
		`service "a" { command = ["x"] count = null exclusive = null stop_after = null }`,
		`service "a" { command = ["x"] count = 2 spread { attribute = "node.meta.z" target "a" "b" { percent = 1 } target { } } }`,
		`service "a" { command = ["x"] count = 2 spread { attribute = "node.meta.z" target "a" { percent = 1e99 } target "" { percent = -1 } } }`,
		`service "a" { command = ["x"] count = 2 constraint { attribute = "${node.meta}" } constraint { attribute = "${node[0]}" } }`,
		`service "a" { command = ["x"] count = 2 constraint { attribute = "${node.meta.x}${y}" } affinity { attribute = "${var.x}" } }`,
		`service "a" { command = ["x"] count = 1 constraint { attribute = "node.name" operator = "version" value = "~>" } }`,
		`service "a" { command = ["x"] count = 1 constraint { attribute = ["x"] operator = {} value = [] } }`,
		`service "a" { command = ["x"] count = 1 affinity { attribute = "service." operator = "==~" weight = 1e99 } }`,
		`service "a" { command = ["x"] count = 1 reschedule { attempts = 1e99 interval = null unlimited = null } reschedule {} }`,
		`service "a" { command = ["x"] restart { on_exhausted = "reschedule" } reschedule {} }`,
		`group "g" { count = 1 service "a" { command = ["x"] count = 1 } service "a" { command = ["x"] } }`,
		`group "g" { count = 1 constraint { attribute = "service.a" } service "a" { command = ["x"] leader {} id = "x" } }`,
		`group "g" { spread { attribute = "node.name" } update {} }`,
		`service "a" { command = ["x"] count = 1e99 update { max_parallel = 1e99 canary = -1e99 auto_promote = null } update {} }`,
		`service "a" { command = ["x"] count = 2 update { healthy_deadline = null min_healthy_time = "1h" progress_deadline = "1ns" health_check = [] } }`,
		`group "g" { count = 1 update { canary = 5 auto_promote = true } service "a" { command = ["x"] update {} } }`,
		// volumes
		`service "a" { command = ["x"] volume "d" {} }`,
		`service "a" { command = ["x"] count = 1 volume {} volume "a" "b" {} volume "" { path = "" } }`,
		`service "a" { command = ["x"] count = 1 volume "d" { path = null handoff = null replicas = 1e99 interval = null } }`,
		`service "a" { command = ["x"] count = 1 volume "d" { path = "/../a//./" } volume "D" { path = "\x00" } volume "d-" { path = "d/" } }`,
		`service "a" { command = ["x"] count = 1 exclusive = null volume "d" { handoff = "snapshot" snapshot = [null] restore = [[]] } }`,
		`service "a" { command = ["x"] count = 1 exclusive = var.nope volume "d" { handoff = ["snapshot"] on_missing = {} } }`,
		`group "g" { count = 1 volume "d" { handoff = "snapshot" } service "a" { command = ["x"] volume "d" {} } }`,
	}
}

func addFixtureSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.hcl")
	more, _ := filepath.Glob("testdata/*/*/*.hcl")
	for _, p := range append(files, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
}

// FuzzLoad feeds arbitrary bytes to the loader (without Load's recover, so
// a panic fails) and checks its contract: errors mean no config, and every
// diagnostic can be printed.
func FuzzLoad(f *testing.F) {
	addFixtureSeeds(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		src := source{name: filepath.Join(dir, "fuzz.hcl"), abs: filepath.Join(dir, "fuzz.hcl"), data: data}
		cfg, diags := load([]source{src}, LoadOptions{Environ: []string{"A=1"}, Vars: map[string]string{"x": "1"}})
		if diags == nil {
			t.Fatal("nil diagnostics")
		}
		if diags.HasErrors() && cfg != nil {
			t.Fatal("config returned with errors")
		}
		if !diags.HasErrors() && cfg == nil {
			t.Fatal("no config and no errors")
		}
		_ = diags.Error()
		if _, err := diags.MarshalJSON(); err != nil {
			t.Fatal(err)
		}
		if err := diags.WriteText(discard{}, 80, true); err != nil {
			t.Fatal(err)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
