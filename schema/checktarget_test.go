package schema

import "testing"

// A check may leave out its host (and port): an http path, a tcp ":port"
// or an empty tcp target are on the service's own address and port.
func TestCheckTargetOnService(t *testing.T) {
	cfg, diags := loadSrc(t, t.TempDir(), `
service "web" {
  command = ["x"]
  port    = 8080
  check "path" {
    http = "/health?full=1"
  }
  check "self" {
    tcp = ""
  }
  check "port" {
    tcp = ":9000"
  }
  check "url" {
    http = "http://127.0.0.1:8080/"
  }
}
`, LoadOptions{Environ: testEnv})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	want := map[string]struct {
		target string
		on     bool
	}{
		"path": {"/health?full=1", true}, "self": {"", true}, "port": {":9000", true}, "url": {"http://127.0.0.1:8080/", false},
	}
	for _, c := range cfg.Services[0].Checks {
		if w := want[c.Name]; c.Target != w.target || c.OnService() != w.on {
			t.Errorf("check %s: target %q on service %v; want %q %v", c.Name, c.Target, c.OnService(), w.target, w.on)
		}
	}
}
