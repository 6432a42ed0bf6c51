package main

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// headCommit is the commit make stamps: the short hash, -dirty when the
// tree has changes.
func headCommit(t *testing.T) string {
	t.Helper()
	gitBin := tool(t, "git")
	head, err := exec.Command(gitBin, "rev-parse", "--short", "HEAD").Output()
	consultest.Require(t, err == nil, "not a git checkout")
	c := strings.TrimSpace(string(head))
	if strings.TrimSpace(run(t, nil, gitBin, "status", "--porcelain")) != "" {
		c += "-dirty"
	}
	return c
}

// make release: static linux/amd64 and linux/arm64 binaries, stamped with
// the version and the commit, and their SHA256SUMS.
func TestMakeRelease(t *testing.T) {
	consultest.SkipShort(t, "cross-builds mariposa twice")
	makeBin := tool(t, "make")
	tool(t, "go")
	tool(t, "sha256sum")
	dir := t.TempDir()
	run(t, nil, makeBin, "-s", "release", "RELEASE_DIR="+dir, "VERSION=9.8.7", "PRERELEASE=rc1")
	commit := headCommit(t)

	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(sums)))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		listed[name] = sum
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		name := "mariposa_9.8.7-rc1_linux_" + arch
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := sha256.Sum256(b)
		if listed[name] != hex.EncodeToString(h[:]) {
			t.Errorf("SHA256SUMS says %q for %s, want %x", listed[name], name, h)
		}
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machine {
			t.Errorf("%s is for %v", name, f.Machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", name)
			}
		}
		f.Close()
	}
	if len(listed) != 2 {
		t.Errorf("SHA256SUMS lists %d files:\n%s", len(listed), sums)
	}
	out := strings.TrimSpace(run(t, nil, filepath.Join(dir, "mariposa_9.8.7-rc1_linux_amd64"), "version"))
	if want := "mariposa v9.8.7-rc1 (commit " + commit + ")"; out != want {
		t.Errorf("mariposa version = %q, want %q", out, want)
	}
}

// make install: the binary, the man page, completions, the systemd unit
// (which systemd-analyze verifies) and /etc/mariposa, whose files a second
// install keeps.
func TestMakeInstall(t *testing.T) {
	consultest.SkipShort(t, "builds and installs mariposa")
	makeBin := tool(t, "make")
	tool(t, "go")
	root := t.TempDir()
	prefix, etc, units := filepath.Join(root, "usr"), filepath.Join(root, "etc"), filepath.Join(root, "lib/systemd/system")
	args := []string{"-s", "install", "PREFIX=" + prefix, "SYSCONFDIR=" + etc, "UNITDIR=" + units, "BIN=" + filepath.Join(root, "build/mariposa")}
	run(t, nil, makeBin, args...)

	bin := filepath.Join(prefix, "bin/mariposa")
	for p, mode := range map[string]os.FileMode{
		bin:                                   0o755,
		prefix + "/share/man/man1/mariposa.1": 0o644,
		prefix + "/share/bash-completion/completions/mariposa": 0o644,
		prefix + "/share/zsh/site-functions/_mariposa":         0o644,
		units + "/mariposa.service":                            0o644,
		etc + "/mariposa/mariposa.env":                         0o644,
		etc + "/mariposa/consul.token.example":                 0o600,
		etc + "/mariposa/services.d/example.hcl":               0o644,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}
	if out := run(t, nil, bin, "version"); !strings.Contains(out, "(commit "+headCommit(t)+")") {
		t.Errorf("installed mariposa version = %q", out)
	}
	// The example configuration is valid as installed.
	if out := run(t, nil, bin, "validate", etc+"/mariposa/services.d"); !strings.Contains(out, "valid") {
		t.Errorf("validate: %s", out)
	}
	// The unit runs the installed binary on the installed configuration.
	unit, _ := os.ReadFile(units + "/mariposa.service")
	for _, want := range []string{
		"ExecStart=" + bin + " run $MARIPOSA_OPTS " + etc + "/mariposa/services.d\n",
		"EnvironmentFile=-" + etc + "/mariposa/mariposa.env\n",
		"Type=notify\n", "ExecReload=/bin/kill -HUP $MAINPID\n", "KillMode=mixed\n", "Restart=on-failure\n", "Delegate=yes\n",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the installed unit lacks %q:\n%s", want, unit)
		}
	}
	if b, _ := os.ReadFile(prefix + "/share/bash-completion/completions/mariposa"); !strings.Contains(string(b), "-C "+bin+" mariposa") {
		t.Errorf("bash completion names another binary:\n%s", b)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	consultest.Require(t, err == nil, "systemd-analyze not installed (Debian: systemd)")
	verify := []string{"verify", "--man=no", units + "/mariposa.service"}
	if _, err := exec.LookPath("man"); err == nil {
		verify[1] = "--man=yes" // Documentation=man:mariposa(1), the installed page
	}
	cmd := exec.Command(analyze, verify...)
	cmd.Env = append(os.Environ(), "MANPATH="+prefix+"/share/man")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(verify, " "), err, out)
	}

	// A second install keeps the operator's configuration.
	if err := os.WriteFile(etc+"/mariposa/mariposa.env", []byte("MARIPOSA_OPTS=-cluster\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, nil, makeBin, args...)
	if b, _ := os.ReadFile(etc + "/mariposa/mariposa.env"); string(b) != "MARIPOSA_OPTS=-cluster\n" {
		t.Errorf("a second make install replaced mariposa.env:\n%s\n%s", b, out)
	}
}

// The website's systemd page shows the unit that make install installs.
func TestSystemdPageShowsTheUnit(t *testing.T) {
	unit, err := os.ReadFile("packaging/systemd/mariposa.service")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("website/systemd.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```ini\n"+string(unit)+"```\n") {
		t.Error("website/systemd.md does not show packaging/systemd/mariposa.service as it is")
	}
}

// The container example: its services are valid and formatted, and its
// Dockerfile copies what make release and the repository have.
func TestContainerExample(t *testing.T) {
	const hcl = "packaging/container/services.hcl"
	cfg, diags := schema.Load([]string{hcl}, schema.LoadOptions{Environ: []string{}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if len(cfg.Services) != 2 {
		t.Errorf("the example supervises %d processes, want 2", len(cfg.Services))
	}
	src, _ := os.ReadFile(hcl)
	if out, fd := schema.Format(src, hcl); fd.HasErrors() || string(out) != string(src) {
		t.Errorf("%s is not formatted (mariposa fmt)", hcl)
	}
	// website/containers.md shows the services as they are.
	body := string(src)
	for strings.HasPrefix(body, "#") {
		_, body, _ = strings.Cut(body, "\n")
	}
	if page, _ := os.ReadFile("website/containers.md"); !strings.Contains(string(page), "```hcl\n"+body+"```\n") {
		t.Errorf("website/containers.md does not show %s as it is", hcl)
	}
	docker, err := os.ReadFile("packaging/container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	copies := regexp.MustCompile(`(?m)^COPY (\S+) `).FindAllStringSubmatch(string(docker), -1)
	if len(copies) != 2 {
		t.Fatalf("COPY lines: %v", copies)
	}
	if !strings.HasPrefix(copies[0][1], "build/release/mariposa_${MARIPOSA_VERSION}_linux_${TARGETARCH}") {
		t.Errorf("the Dockerfile copies %s, not a binary of make release", copies[0][1])
	}
	if copies[1][1] != hcl {
		t.Errorf("the Dockerfile copies %s, want %s", copies[1][1], hcl)
	}
	if !strings.Contains(string(docker), `ENTRYPOINT ["/usr/local/bin/mariposa", "run"]`) {
		t.Error("mariposa is not the container's entrypoint (PID 1)")
	}
}
