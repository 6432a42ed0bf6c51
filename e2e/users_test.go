package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// procStatus reads the named lines of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// TestServiceUser: user = "nobody" runs the service as nobody (uid, gid,
// groups as /proc shows them, HOME, USER and LOGNAME as login sets them),
// which cannot read a 0600 root file nor gain privileges (no_new_privs); its template is given to nobody, and
// its args check runs as nobody too.
func TestServiceUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir, err := os.MkdirTemp("", "mariposa-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	hcl := writeHCL(t, fmt.Sprintf(`
service "asnobody" {
  dir     = %q
  user    = "nobody"
  command = ["sh", "-c", "cat secret >/dev/null 2>&1; echo $? > secret.status; cat app.conf > conf.copy; exec sleep 600"]
  template {
    contents    = "key = value\n"
    destination = "app.conf"
    perms       = "0600"
  }
  template {
    contents    = "other\n"
    destination = "other.conf"
    perms       = "0640"
    user        = "root"
    group       = "nogroup"
  }
  check "whoami" {
    args     = ["sh", "-c", "id -u > check.uid"]
    interval = "1h"
  }
}
`, dir))
	m := startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "asnobody", agent.Name)
	_ = m

	st := procStatus(t, pid)
	if st["Uid"] != "65534 65534 65534 65534" || st["Gid"] != "65534 65534 65534 65534" || st["Groups"] != "" {
		t.Fatalf("not nobody: Uid %q Gid %q Groups %q", st["Uid"], st["Gid"], st["Groups"])
	}
	// no_new_privs by default for a service that switches user.
	if st["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs %q, want 1", st["NoNewPrivs"])
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, want := range []string{"HOME=/nonexistent", "USER=nobody", "LOGNAME=nobody"} {
		if !strings.Contains("\x00"+string(env), "\x00"+want+"\x00") {
			t.Errorf("environment lacks %s", want)
		}
	}
	read := func(name string) string {
		var b []byte
		waitFor(t, 20*time.Second, name+" written", func() (bool, string) {
			b, err = os.ReadFile(filepath.Join(dir, name))
			return err == nil && len(b) > 0, fmt.Sprint(err)
		})
		return strings.TrimSpace(string(b))
	}
	if s := read("secret.status"); s == "0" {
		t.Fatalf("nobody read a 0600 root file (cat exited %s)", s)
	}
	if s := read("conf.copy"); s != "key = value" {
		t.Fatalf("the service could not read its own 0600 template: %q", s)
	}
	if s := read("check.uid"); s != "65534" {
		t.Fatalf("the args check ran as uid %s", s)
	}
	for name, want := range map[string][3]uint32{"app.conf": {65534, 65534, 0o600}, "other.conf": {0, 65534, 0o640}} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if sys.Uid != want[0] || sys.Gid != want[1] || uint32(fi.Mode().Perm()) != want[2] {
			t.Errorf("%s: owner %d:%d mode %o, want %d:%d %o", name, sys.Uid, sys.Gid, fi.Mode().Perm(), want[0], want[1], want[2])
		}
	}
}

// TestCannotSwitchUsers: a mariposa that cannot switch users (here: run as
// nobody) refuses to run a service with a user, naming its position, and
// starts nothing; validate warns at the same position and exits 0.
func TestCannotSwitchUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "mariposa-nouser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "mariposa")
	b, err := os.ReadFile(mariposaBin)
	if err != nil {
		t.Fatal(err)
	}
	hcl := filepath.Join(dir, "svc.hcl")
	marker := filepath.Join(dir, "started")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hcl, []byte(fmt.Sprintf(`service "db" {
  command = ["sh", "-c", "touch %s; exec sleep 600"]
  user    = "root"
}
`, marker)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "MARIPOSA_CONTROL_SOCKET=" + filepath.Join(dir, "s")}
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	where := hcl + ":3:13"
	out, code := asNobody("validate", hcl)
	if code != 0 || !strings.Contains(out, "Warning: "+where+": Cannot switch users") {
		t.Errorf("validate as nobody: exit %d, want 0 with a warning at %s:\n%s", code, where, out)
	}
	out, code = asNobody("run", "-consul-addr", "127.0.0.1:1", hcl)
	if code != 1 || !strings.Contains(out, "Error: "+where+": Cannot switch users") {
		t.Errorf("run as nobody: exit %d, want 1 with the error at %s:\n%s", code, where, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the service started")
	}
}
