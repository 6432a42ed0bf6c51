package docs

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// navConfig is docs/site/data/nav.toml.
type navConfig struct {
	Sections []struct {
		Title    string
		Commands bool
		Pages    []struct {
			Path  string
			Label string
		}
	}
}

func readNav(t *testing.T) navConfig {
	t.Helper()
	var nav navConfig
	if _, err := toml.DecodeFile("site/data/nav.toml", &nav); err != nil {
		t.Fatal(err)
	}
	return nav
}

// websitePages lists the Markdown pages of website/, as paths relative to
// it ("commands/run.md").
func websitePages(t *testing.T) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir("../website", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, _ := filepath.Rel("../website", p)
		pages = append(pages, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	return pages
}

// pageURL is where the site serves a page of website/.
func pageURL(p string) string {
	switch {
	case p == "index.md":
		return "/"
	case path.Base(p) == "index.md":
		return "/" + path.Dir(p) + "/"
	}
	return "/" + strings.TrimSuffix(p, ".md") + "/"
}

// Every page of website/ is in the navigation once (commands/ by the
// Commands section, which lists them all), and the navigation names no
// page that does not exist.
func TestNavListsEveryPage(t *testing.T) {
	nav := readNav(t)
	listed := map[string]int{}
	commands := false
	for _, s := range nav.Sections {
		commands = commands || s.Commands
		for _, p := range s.Pages {
			listed[p.Path]++
		}
	}
	if !commands {
		t.Error("no section lists the commands (commands = true)")
	}
	exists := map[string]bool{}
	for _, p := range websitePages(t) {
		exists[p] = true
		if strings.HasPrefix(p, "commands/") {
			if listed[p] > 0 {
				t.Errorf("%s is listed by hand; the Commands section lists every command page", p)
			}
			continue
		}
		switch listed[p] {
		case 0:
			t.Errorf("website/%s is not in docs/site/data/nav.toml: nobody could find it", p)
		case 1:
		default:
			t.Errorf("website/%s is in the navigation %d times", p, listed[p])
		}
	}
	for p := range listed {
		if !exists[p] {
			t.Errorf("docs/site/data/nav.toml lists %s, which website/ does not have", p)
		}
	}
}

// The SVG diagrams drawn by graphviz are what their .dot sources render to
// (make diagrams).
func TestDiagramsCurrent(t *testing.T) {
	dot, err := exec.LookPath("dot")
	consultest.Require(t, err == nil, "dot not installed (Debian: graphviz)")
	srcs, _ := filepath.Glob("../website/diagrams/*.dot")
	if len(srcs) == 0 {
		t.Fatal("no diagram sources in website/diagrams")
	}
	for _, src := range srcs {
		want, err := exec.Command(dot, "-Tsvg", src).Output()
		if err != nil {
			t.Fatalf("dot %s: %v", src, err)
		}
		svg := strings.TrimSuffix(src, ".dot") + ".svg"
		got, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what %s renders to: run make diagrams", svg, src)
		}
	}
}
