package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// buildMariposa builds the binary once for the tests that run it.
func buildMariposa(t *testing.T) string {
	t.Helper()
	goBin := tool(t, "go")
	bin := filepath.Join(t.TempDir(), "mariposa")
	run(t, nil, goBin, "build", "-o", bin, ".")
	return bin
}

// complete asks bin what the shell should offer for line, as bash's
// `complete -C` and the zsh function do.
func completions(t *testing.T, bin, dir, line string) []string {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COMP_LINE="+line, "COMP_POINT="+strconv.Itoa(len(line)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("completing %q: %v", line, err)
	}
	return strings.Fields(string(out))
}

func has(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, x := range list {
			found = found || x == w
		}
		if !found {
			return false
		}
	}
	return true
}

// Shell completion: commands, nested commands, each command's flags (from
// its help) and .hcl files; installing it for bash and zsh; the files make
// install puts in place.
func TestShellCompletion(t *testing.T) {
	consultest.SkipShort(t, "builds mariposa")
	bin := buildMariposa(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "web.hcl"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644)
	os.Mkdir(filepath.Join(dir, "services.d"), 0o755)

	for _, tc := range []struct {
		line      string
		want, not []string
	}{
		{"mariposa ", []string{"run", "validate", "deploy", "version"}, nil},
		{"mariposa va", []string{"validate"}, []string{"run"}},
		{"mariposa deploy ", []string{"promote", "health", "stop"}, nil},
		{"mariposa deploy stop -", []string{"-purge", "-timeout"}, nil},
		{"mariposa queue ", []string{"drop"}, nil},
		{"mariposa run -con", []string{"-consul-addr", "-control-socket"}, []string{"-dev"}},
		{"mariposa status -", []string{"-token-file", "-json"}, nil},
		{"mariposa validate ", []string{"web.hcl", "services.d/"}, []string{"notes.txt"}},
	} {
		got := completions(t, bin, dir, tc.line)
		if !has(got, tc.want...) {
			t.Errorf("%q completes to %v, want %v among them", tc.line, got, tc.want)
		}
		for _, n := range tc.not {
			if has(got, n) {
				t.Errorf("%q completes to %v, with %q", tc.line, got, n)
			}
		}
	}

	// The bash file of make install registers the installed binary.
	bash := tool(t, "bash")
	out := run(t, nil, bash, "-c", "source packaging/completion/mariposa.bash && complete -p mariposa")
	if !strings.Contains(out, "-C '/usr/local/bin/mariposa' mariposa") {
		t.Errorf("bash: complete -p mariposa = %q", out)
	}

	// The zsh function, run with zsh's completion variables and compadd
	// standing in for the completion system: it offers what mariposa says.
	zsh, err := exec.LookPath("zsh")
	consultest.Require(t, err == nil, "zsh not installed (Debian: zsh)")
	fn, _ := filepath.Abs("packaging/completion/_mariposa")
	script := `compadd() { print -r -- "compadd $*" }; words=(mariposa va); CURRENT=2; source ` + fn + `
words=(mariposa validate ""); CURRENT=3; source ` + fn
	cmd := exec.Command(zsh, "-f", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, b)
	}
	for _, want := range []string{"compadd -- validate", "compadd -- web.hcl", "compadd -S  -- services.d/"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("zsh completion lacks %q:\n%s", want, b)
		}
	}
}

// -autocomplete-install and -uninstall reach mitchellh/cli (which edits the
// user's ~/.bashrc and ~/.zshrc) instead of being refused as flags without
// a command.
func TestIsAutocompleteFlag(t *testing.T) {
	for args, want := range map[string]bool{
		"-autocomplete-install":    true,
		"--autocomplete-install":   true,
		"-autocomplete-uninstall":  true,
		"-autocomplete-install -x": false,
		"-dev":                     false,
		"":                         false,
	} {
		if got := isAutocompleteFlag(strings.Fields(args)); got != want {
			t.Errorf("isAutocompleteFlag(%q) = %v", args, got)
		}
	}
}
