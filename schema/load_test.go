package schema

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// testEnv keeps tests independent of the machine's environment.
var testEnv = []string{"MARIPOSA_TEST_HOME=/home/test"}

func mustLoad(t *testing.T, opts LoadOptions, paths ...string) *Config {
	t.Helper()
	if opts.Environ == nil {
		opts.Environ = testEnv
	}
	cfg, diags := Load(paths, opts)
	if diags.Len() > 0 {
		t.Fatalf("Load(%v): unexpected diagnostics:\n%s", paths, diags.Error())
	}
	if cfg == nil {
		t.Fatalf("Load(%v): nil config without diagnostics", paths)
	}
	return cfg
}

func TestValidFixturesLoadClean(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.hcl")
	if err != nil || len(files) < 5 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			mustLoad(t, LoadOptions{}, f)
		})
	}
	t.Run("directory", func(t *testing.T) {
		cfg := mustLoad(t, LoadOptions{}, "testdata/valid")
		var names []string
		for _, s := range cfg.Services {
			names = append(names, s.Name)
		}
		want := []string{"search", "scheduler", "shop", "shop-worker", "trac", "trac-worker", "mysql", "api", "cache", "wiki", "wiki-indexer", "web", "webapp"}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("services in load order = %v, want %v", names, want)
		}
		if len(cfg.Files) != len(files) {
			t.Errorf("Files = %v", cfg.Files)
		}
		for _, f := range cfg.Files {
			if !filepath.IsAbs(f) {
				t.Errorf("file %q is not absolute", f)
			}
		}
	})
}

func TestDecodedValues(t *testing.T) {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	validDir := abs("testdata/valid")
	cfg := mustLoad(t, LoadOptions{}, "testdata/valid")
	svc := func(name string) *Service {
		s := cfg.Service(name)
		if s == nil {
			t.Fatalf("no service %q", name)
		}
		return s
	}
	web, mysql, webapp, api := svc("web"), svc("mysql"), svc("webapp"), svc("api")
	trac, worker := svc("trac"), svc("trac-worker")

	tests := []struct {
		name      string
		got, want any
	}{
		// web: every attribute and every check kind.
		{"web.command", web.Command, []string{"python3", "-m", "http.server", "8080"}},
		{"web.id", web.ID, "web-main"},
		{"web.dir", web.Dir, "/srv/web"},
		{"web.env", web.Env, map[string]string{"GREETING": "hello", "PORT": "8080"}},
		{"web.port", web.Port, 8080},
		{"web.address", web.Address, "127.0.0.1"},
		{"web.tags", web.Tags, []string{"v1", "http"}},
		{"web.meta", web.Meta, map[string]string{"team": "storefront"}},
		{"web.version", web.Version, "1.4.2"},
		{"web.group", web.Group, ""},
		{"web.source", web.SourceFile, filepath.Join(validDir, "web.hcl")},
		{"web.sourcedir", web.SourceDir, validDir},
		{"web.checks", len(web.Checks), 5},
		{"web.check0", *web.Checks[0], Check{Name: "http", Kind: CheckHTTP, Target: "http://127.0.0.1:8080/",
			Interval: 2 * time.Second, Timeout: time.Second, SuccessBeforePassing: 1, FailuresBeforeCritical: 2,
			DeregisterCriticalAfter: 10 * time.Minute}},
		{"web.check1", *web.Checks[1], Check{Name: "tcp", Kind: CheckTCP, Target: "127.0.0.1:8080",
			Interval: 10 * time.Second, Timeout: 5 * time.Second}},
		{"web.check2", *web.Checks[2], Check{Name: "grpc", Kind: CheckGRPC, Target: "127.0.0.1:9090/health",
			Interval: 5 * time.Second, Timeout: 5 * time.Second}},
		{"web.check3", *web.Checks[3], Check{Name: "script", Kind: CheckArgs, Args: []string{"/usr/local/bin/check-web", "--quick"},
			Interval: 30 * time.Second, Timeout: 10 * time.Second}},
		{"web.check4", *web.Checks[4], Check{Name: "heartbeat", Kind: CheckTTL, TTL: 15 * time.Second}},
		{"web.restart", web.Restart, Restart{Policy: RestartAlways, OnUnhealthy: false, Grace: 20 * time.Second,
			UnhealthyFor: 5 * time.Second, Attempts: 5, Window: 10 * time.Minute, Delay: 2 * time.Second,
			MaxDelay: 30 * time.Second, OnExhausted: "fail"}},
		{"web.stop", web.Stop, Stop{Signal: syscall.SIGINT, Timeout: 30 * time.Second, Drain: 5 * time.Second}},
		{"web.leader", web.Leader, (*Leader)(nil)},

		// mysql: leader in tag mode, restart and stop partly defaulted.
		{"mysql.leader", *mysql.Leader, Leader{Mode: "tag", Tag: "primary", FollowerTag: "replica",
			Key: "mariposa/leader/mysql", SessionTTL: 15 * time.Second, LockDelay: 2 * time.Second,
			ChangeMode: "signal", Signal: syscall.SIGUSR1}},
		{"mysql.restart", mysql.Restart, Restart{Policy: RestartOnFailure, OnUnhealthy: true, Grace: time.Minute,
			Attempts: 10, Window: 5 * time.Minute, Delay: time.Second, MaxDelay: time.Minute, OnExhausted: "fail"}},
		{"mysql.stop", mysql.Stop, Stop{Signal: syscall.SIGTERM, Timeout: 2 * time.Minute}},
		{"mysql.dir", mysql.Dir, ""},

		// webapp: dependencies and templates, relative paths made absolute.
		{"webapp.dir", webapp.Dir, filepath.Join(validDir, "app")},
		{"webapp.dep0", *webapp.Depends[0], Dependency{Name: "db", Service: "mysql", Tag: "primary", Passing: 1,
			Timeout: 5 * time.Minute, OnLost: "restart", EnvPrefix: "DB"}},
		{"webapp.dep1", *webapp.Depends[1], Dependency{Name: "cache", Service: "cache", Registered: 2,
			OnLost: "ignore", EnvPrefix: "REDIS"}},
		{"webapp.tmpl0", *webapp.Templates[0], Template{Source: filepath.Join(validDir, "webapp.ini.tpl"),
			Destination: filepath.Join(validDir, "app/conf/app.ini"), Perms: 0o640, ChangeMode: "restart"}},
		{"webapp.tmpl1", *webapp.Templates[1], Template{
			Contents:    "{{ range service \"primary.mysql\" }}DB_HOST={{ .Address }}{{ end }}\n",
			Destination: "/run/webapp/db.env", Perms: 0o644, ChangeMode: "restart", Env: true,
			WaitMin: 2 * time.Second, WaitMax: 10 * time.Second}},
		{"webapp.tmpl2.signal", webapp.Templates[2].Signal, syscall.SIGHUP},
		{"webapp.tmpl2.dest", webapp.Templates[2].Destination, filepath.Join(validDir, "app/conf/motd.txt")},
		{"webapp.tmpl3.command", webapp.Templates[3].Command, []string{"/usr/sbin/nginx", "-s", "reload"}},
		{"webapp.tmpl3.wait", [2]time.Duration{webapp.Templates[3].WaitMin, webapp.Templates[3].WaitMax},
			[2]time.Duration{time.Second, 4 * time.Second}},
		{"webapp.restart.on_unhealthy", webapp.Restart.OnUnhealthy, true},

		// group members.
		{"trac.group", trac.Group, "trac"},
		{"worker.group", worker.Group, "trac"},
		{"groups", len(cfg.Groups), 3},
		{"group.shop", [2]any{cfg.Groups[0].Name, cfg.Groups[0].Services}, [2]any{"shop", []string{"shop", "shop-worker"}}},
		{"group.trac", cfg.Groups[1], &Group{Name: "trac", Services: []string{"trac", "trac-worker"}}},
		{"worker.dep", *worker.Depends[0], Dependency{Name: "trac", Service: "trac", Passing: 1, OnLost: "ignore", EnvPrefix: "TRAC"}},
		{"worker.restart.on_unhealthy", worker.Restart.OnUnhealthy, false},
		{"worker.port", worker.Port, 0},

		// variables and functions.
		{"api.command", api.Command, []string{"/usr/bin/api", "--region", "EU-WEST", "--tag=blue"}},
		{"api.tags", api.Tags, []string{"api-eu-west", "blue"}},
		{"api.port", api.Port, 9002},
		{"api.env", api.Env, map[string]string{"REGION": "eu-west", "HOME": "/home/test", "LOG_LEVEL": "info", "WORKERS": "4"}},
		{"api.meta", api.Meta, map[string]string{"replicas": "2", "owner": "platform", "summary": "eu-west/2",
			"joined": "a,x,c", "longest": "7", "first": "fallback"}},
		{"api.version", api.Version, "2.0.1"},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s:\n got  %#v\n want %#v", tt.name, tt.got, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "min.hcl", `
service "a" {
  command = ["a"]
}
service "b" {
  command = ["b"]
  check "t" {
    ttl = "30s"
  }
  depends_on "a" {}
  template {
    contents    = "x"
    destination = "out.txt"
  }
  leader {}
}
`)
	cfg := mustLoad(t, LoadOptions{}, filepath.Join(dir, "min.hcl"))
	a, b := cfg.Service("a"), cfg.Service("b")
	wantRestart := Restart{Policy: RestartOnFailure, OnUnhealthy: false, Grace: 10 * time.Second,
		Attempts: 10, Window: 5 * time.Minute, Delay: time.Second, MaxDelay: time.Minute, OnExhausted: "fail"}
	if a.Restart != wantRestart {
		t.Errorf("a.Restart = %+v, want %+v", a.Restart, wantRestart)
	}
	wantRestart.OnUnhealthy = true
	if b.Restart != wantRestart {
		t.Errorf("b.Restart = %+v (on_unhealthy defaults to true with a check)", b.Restart)
	}
	if want := (Stop{Signal: syscall.SIGTERM, Timeout: 10 * time.Second}); a.Stop != want {
		t.Errorf("a.Stop = %+v", a.Stop)
	}
	if a.Leader != nil || a.Checks != nil || a.Depends != nil || a.Templates != nil {
		t.Errorf("a has unexpected parts: %+v", a)
	}
	if want := (Leader{Mode: "standby", Tag: "leader", FollowerTag: "follower", Key: "mariposa/leader/b",
		SessionTTL: 10 * time.Second, LockDelay: time.Second, ChangeMode: "restart"}); *b.Leader != want {
		t.Errorf("b.Leader = %+v", *b.Leader)
	}
	if want := (Dependency{Name: "a", Service: "a", Passing: 1, OnLost: "ignore", EnvPrefix: "A"}); *b.Depends[0] != want {
		t.Errorf("b.Depends[0] = %+v", *b.Depends[0])
	}
	realDir, _ := filepath.Abs(dir)
	if want := (Template{Contents: "x", Destination: filepath.Join(realDir, "out.txt"), Perms: 0o644,
		ChangeMode: "restart"}); !reflect.DeepEqual(*b.Templates[0], want) {
		t.Errorf("b.Templates[0] = %+v", *b.Templates[0])
	}
	if c := b.Checks[0]; c.Interval != 0 || c.Timeout != 0 || c.TTL != 30*time.Second {
		t.Errorf("ttl check = %+v", c)
	}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
