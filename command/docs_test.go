package command

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/schema"
)

// fencedBlocks returns the bodies of the markdown's ``` blocks of lang, in
// order, each with the offset just after it.
func fencedBlocks(md, lang string) (bodies []string, ends []int) {
	open := "```" + lang + "\n"
	for off := 0; ; {
		i := strings.Index(md[off:], open)
		if i < 0 {
			return bodies, ends
		}
		start := off + i + len(open)
		j := strings.Index(md[start:], "```")
		if j < 0 {
			return bodies, ends
		}
		bodies = append(bodies, md[start:start+j])
		off = start + j + 3
		ends = append(ends, off)
	}
}

// What getting-started.md shows for a bad port is what validate and run
// really print, position included.
func TestGettingStartedBadPort(t *testing.T) {
	b, err := os.ReadFile("../website/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	hcls, _ := fencedBlocks(md, "hcl")
	if len(hcls) == 0 {
		t.Fatal("getting-started.md has no hcl block")
	}
	const good, bad = "  port    = 8080\n", "  port    = 70000\n"
	if strings.Count(hcls[0], good) != 1 {
		t.Fatalf("the first hcl block has no single %q line:\n%s", good, hcls[0])
	}
	at := strings.Index(md, "Set `port = 70000` in `hello.hcl`")
	if at < 0 {
		t.Fatal("getting-started.md no longer says to set port = 70000")
	}
	texts, ends := fencedBlocks(md, "text")
	var shown string
	for i, e := range ends {
		if e > at {
			shown = strings.TrimSpace(texts[i])
			break
		}
	}
	if shown == "" {
		t.Fatal("no text block after the bad-port paragraph")
	}

	t.Chdir(t.TempDir())
	if err := os.WriteFile("hello.hcl", []byte(strings.Replace(hcls[0], good, bad, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: []string{"PATH=" + os.Getenv("PATH")}}).Run([]string{"hello.hcl"}); code != 1 {
		t.Errorf("validate exit %d", code)
	}
	if got := strings.TrimSpace(ui.ErrorWriter.String()); got != shown {
		t.Errorf("validate prints:\n%s\n\ngetting-started.md shows:\n%s", got, shown)
	}

	ui = cli.NewMockUi()
	if code := (&RunCommand{UI: ui}).Run([]string{"-consul-addr", "127.0.0.1:1", "hello.hcl"}); code != 1 {
		t.Errorf("run exit %d", code)
	}
	wantRun := strings.TrimSpace(strings.TrimSuffix(shown, "1 error, 0 warnings."))
	if got := strings.TrimSpace(ui.ErrorWriter.String()); got != wantRun {
		t.Errorf("run prints:\n%s\n\nwant the same message:\n%s", got, wantRun)
	}
}

// The quick-start demo serves a small directory of its own (not the
// repository, .git included), and its check fetches a small file in it.
func TestDemoExample(t *testing.T) {
	cfg, diags := schema.Load([]string{"../testdata/examples/hello.hcl"}, schema.LoadOptions{Environ: []string{}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	svc := cfg.Service("hello")
	if svc == nil || len(svc.Checks) != 1 {
		t.Fatalf("hello: %+v", svc)
	}
	want, _ := filepath.Abs("../testdata/examples/hello")
	if svc.Dir != want {
		t.Fatalf("dir = %q, want %q", svc.Dir, want)
	}
	entries, err := os.ReadDir(svc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("the served directory has a subdirectory %q", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(svc.Dir, "index.html")); err != nil {
		t.Error(err)
	}
	u, err := url.Parse(svc.Checks[0].Target)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(svc.Dir, filepath.FromSlash(u.Path)))
	if err != nil || fi.IsDir() || fi.Size() > 64 {
		t.Errorf("the check fetches %q: want a small file in %s (%v)", u.Path, svc.Dir, err)
	}
}
